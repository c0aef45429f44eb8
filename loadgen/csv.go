package loadgen

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CSVHeader is the results CSV's columns, in order (interfaces.md).
var CSVHeader = []string{"policy", "rate", "requests", "errors", "mean_ms", "p50_ms", "p95_ms", "p99_ms", "p995_ms"}

// WriteCSV writes rows with CSVHeader. Numbers use the shortest text that
// reads back exactly; a missing statistic is NaN.
func WriteCSV(w io.Writer, rows []Row) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	for _, r := range rows {
		rec := []string{
			r.Policy, fnum(r.Rate), strconv.Itoa(r.Requests), strconv.Itoa(r.Errors),
			fnum(r.MeanMs), fnum(r.P50Ms), fnum(r.P95Ms), fnum(r.P99Ms), fnum(r.P995Ms),
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteCSVFile writes rows to path atomically (temporary file, rename).
func WriteCSVFile(path string, rows []Row) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create results directory: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".results-*.csv")
	if err != nil {
		return fmt.Errorf("write results csv: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := WriteCSV(tmp, rows); err != nil {
		tmp.Close()
		return fmt.Errorf("write results csv: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write results csv: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write results csv: %w", err)
	}
	return nil
}

// ReadCSV reads rows written by WriteCSV. The header must start with
// CSVHeader; extra trailing columns are ignored.
func ReadCSV(r io.Reader) ([]Row, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	head, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, errors.New("results csv is empty (expected the header " + strings.Join(CSVHeader, ",") + ")")
	}
	if err != nil {
		return nil, fmt.Errorf("read results csv: %w", err)
	}
	if len(head) < len(CSVHeader) {
		return nil, fmt.Errorf("results csv header %q must start with %s", strings.Join(head, ","), strings.Join(CSVHeader, ","))
	}
	for i, h := range CSVHeader {
		if strings.TrimSpace(strings.TrimPrefix(head[i], "\ufeff")) != h {
			return nil, fmt.Errorf("results csv header %q must start with %s", strings.Join(head, ","), strings.Join(CSVHeader, ","))
		}
	}
	var rows []Row
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read results csv: %w", err)
		}
		if len(rec) < len(CSVHeader) {
			return nil, fmt.Errorf("results csv line %d: %d fields, want %d", line, len(rec), len(CSVHeader))
		}
		row, err := parseRow(rec)
		if err != nil {
			return nil, fmt.Errorf("results csv line %d: %w", line, err)
		}
		rows = append(rows, row)
	}
}

// ReadCSVFile reads a results CSV file.
func ReadCSVFile(path string) ([]Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open results csv: %w", err)
	}
	defer f.Close()
	return ReadCSV(f)
}

func parseRow(rec []string) (Row, error) {
	var r Row
	var err error
	if r.Policy = strings.TrimSpace(rec[0]); r.Policy == "" {
		return r, errors.New("empty policy")
	}
	fields := []struct {
		name string
		f    *float64
		i    *int
	}{
		{"rate", &r.Rate, nil}, {"requests", nil, &r.Requests}, {"errors", nil, &r.Errors},
		{"mean_ms", &r.MeanMs, nil}, {"p50_ms", &r.P50Ms, nil}, {"p95_ms", &r.P95Ms, nil},
		{"p99_ms", &r.P99Ms, nil}, {"p995_ms", &r.P995Ms, nil},
	}
	for i, fd := range fields {
		s := strings.TrimSpace(rec[i+1])
		if fd.i != nil {
			if *fd.i, err = strconv.Atoi(s); err != nil || *fd.i < 0 {
				return r, fmt.Errorf("%s %q is not a non-negative integer", fd.name, s)
			}
			continue
		}
		if *fd.f, err = strconv.ParseFloat(s, 64); err != nil {
			return r, fmt.Errorf("%s %q is not a number", fd.name, s)
		}
	}
	if !(r.Rate > 0) {
		return r, fmt.Errorf("rate %v is not positive", r.Rate)
	}
	if r.Errors > r.Requests {
		return r, fmt.Errorf("errors (%d) exceed requests (%d)", r.Errors, r.Requests)
	}
	return r, nil
}

func fnum(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
