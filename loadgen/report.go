package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/swd-project/swd/internal/workload"
)

// Report is everything a sweep, a comparison, a simulation or a capacity
// computation prints.
type Report struct {
	// Title is printed first (e.g. the command and the cluster).
	Title string `json:"title,omitempty"`
	// Workload is nil when unknown (capacity from a CSV file).
	Workload *workload.Spec `json:"workload,omitempty"`
	Rows     []Row          `json:"rows"`
	// Percentiles are the PRT columns shown besides the mean.
	Percentiles  []float64  `json:"percentiles"`
	MaxErrorRate float64    `json:"max_error_rate"`
	Limits       []Limit    `json:"limits,omitempty"`
	Capacities   []Capacity `json:"capacities,omitempty"`
	// Reference, if set, names the system every capacity is divided by
	// (Ratios, computed by WithCapacities).
	Reference string  `json:"reference,omitempty"`
	Ratios    []Ratio `json:"ratios,omitempty"`
	// Blocks are extra policies × rates tables (e.g. the simulator's
	// transfers per request), printed after the response times.
	Blocks []Block `json:"blocks,omitempty"`
	// Notes are printed last, one a line.
	Notes []string `json:"notes,omitempty"`
}

// Block is an extra policies × rates table.
type Block struct {
	Title string `json:"title"`
	Cells []Cell `json:"cells"`
}

// Cell is one value of a Block.
type Cell struct {
	Policy string  `json:"policy"`
	Rate   float64 `json:"rate"`
	Value  float64 `json:"value"`
}

// WithCapacities returns r with limits resolved from spec and capacities
// computed, and with r.Reference set, every capacity as a ratio to the
// reference's; an empty spec leaves r without capacities.
func (r Report) WithCapacities(spec LimitSpec) (Report, error) {
	if spec.Empty() {
		return r, nil
	}
	limits, err := ResolveLimits(spec, r.Percentiles, r.Rows, r.MaxErrorRate)
	if err != nil {
		return r, err
	}
	caps, err := Capacities(r.Rows, limits, r.MaxErrorRate)
	if err != nil {
		return r, err
	}
	r.Limits, r.Capacities = limits, caps
	if r.Reference != "" {
		if r.Ratios, err = Ratios(caps, r.Reference); err != nil {
			return r, err
		}
	}
	return r, nil
}

// WriteTable renders r like the paper's Tables 2-4: for the mean and each
// percentile, a block of policies × rates in ms ("failed" where the error
// fraction exceeds MaxErrorRate, "-" where not measured), an error-count
// block if any request failed, then the capacities.
func (r Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	if r.Title != "" {
		fmt.Fprintln(&b, r.Title)
	}
	if r.Workload != nil {
		fmt.Fprintf(&b, "workload: %s\n", r.Workload)
	}
	pols, rates := Policies(r.Rows), Rates(r.Rows)
	// tabwriter aligns every column right; pad the policy names so the
	// first column reads left-aligned.
	width := len("policy")
	for _, p := range pols {
		width = max(width, len(p))
	}
	left := func(s string) string { return s + strings.Repeat(" ", width-len(s)) }
	index := map[string]map[float64]Row{}
	for _, row := range r.Rows {
		if index[row.Policy] == nil {
			index[row.Policy] = map[float64]Row{}
		}
		index[row.Policy][row.Rate] = row
	}
	block := func(title string, cell func(Row) string) {
		fmt.Fprintf(&b, "\n%s\n", title)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "%s\t", left("policy"))
		for _, rate := range rates {
			fmt.Fprintf(tw, "%s\t", FormatRate(rate))
		}
		fmt.Fprintln(tw)
		for _, p := range pols {
			fmt.Fprintf(tw, "%s\t", left(p))
			for _, rate := range rates {
				row, ok := index[p][rate]
				switch {
				case !ok:
					fmt.Fprint(tw, "-\t")
				default:
					fmt.Fprintf(tw, "%s\t", cell(row))
				}
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
	}
	if len(r.Rows) > 0 {
		stat := func(get func(Row) float64) func(Row) string {
			return func(row Row) string {
				if row.Failed(r.MaxErrorRate) {
					return "failed"
				}
				return fmtMs(get(row))
			}
		}
		block("mean response time (ms), policies × rate (req/s)", stat(func(row Row) float64 { return row.MeanMs }))
		for _, p := range r.Percentiles {
			p := p
			block(PercentileName(p)+" percentile response time (ms)", stat(func(row Row) float64 { v, _ := row.PRT(p); return v }))
		}
		for _, bl := range r.Blocks {
			vals := map[string]map[float64]float64{}
			for _, c := range bl.Cells {
				if vals[c.Policy] == nil {
					vals[c.Policy] = map[float64]float64{}
				}
				vals[c.Policy][c.Rate] = c.Value
			}
			block(bl.Title, func(row Row) string {
				v, ok := vals[row.Policy][row.Rate]
				if !ok {
					return "-"
				}
				return strconv.FormatFloat(v, 'g', 4, 64)
			})
		}
		anyErr := false
		for _, row := range r.Rows {
			anyErr = anyErr || row.Errors > 0
		}
		if anyErr {
			block("errors / requests", func(row Row) string {
				return strconv.Itoa(row.Errors) + "/" + strconv.Itoa(row.Requests)
			})
		}
	} else {
		fmt.Fprintln(&b, "\nno results")
	}
	if len(r.Limits) > 0 {
		// perPercentile prints one row per policy, one column per limit.
		perPercentile := func(head func(Limit) string, cell func(pol string, pct float64) (string, bool)) {
			tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(tw, "%s\t", left("policy"))
			for _, l := range r.Limits {
				fmt.Fprintf(tw, "%s\t", head(l))
			}
			fmt.Fprintln(tw)
			for _, p := range pols {
				fmt.Fprintf(tw, "%s\t", left(p))
				for _, l := range r.Limits {
					if v, ok := cell(p, l.Percentile); ok {
						fmt.Fprintf(tw, "%s\t", v)
					} else {
						fmt.Fprint(tw, "-\t")
					}
				}
				fmt.Fprintln(tw)
			}
			tw.Flush()
		}
		type key struct {
			pol string
			pct float64
		}
		caps := map[key]Capacity{}
		for _, c := range r.Capacities {
			caps[key{c.Policy, c.Percentile}] = c
		}
		fmt.Fprintf(&b, "\ncapacity (req/s): highest rate whose PRT stays within the limit\n")
		perPercentile(func(l Limit) string { return PercentileName(l.Percentile) + " ≤ " + fmtMs(l.Ms) + "ms" },
			func(pol string, pct float64) (string, bool) { c, ok := caps[key{pol, pct}]; return c.String(), ok })
		if from := r.Limits[0].From; from != "" {
			fmt.Fprintf(&b, "limits: %s's PRT at %s req/s\n", strings.Split(from, "@")[0], strings.Split(from, "@")[1])
		}
		if len(r.Ratios) > 0 {
			ratios := map[key]Ratio{}
			for _, x := range r.Ratios {
				ratios[key{x.Policy, x.Percentile}] = x
			}
			fmt.Fprintf(&b, "\ncapacity / %s's capacity\n", r.Reference)
			perPercentile(func(l Limit) string { return PercentileName(l.Percentile) },
				func(pol string, pct float64) (string, bool) { x, ok := ratios[key{pol, pct}]; return x.String(), ok })
		}
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(&b)
		for _, n := range r.Notes {
			fmt.Fprintln(&b, n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes r as indented JSON (NaN statistics as null).
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteJSONFile writes r as JSON to path.
func (r Report) WriteJSONFile(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create output directory: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if err := r.WriteJSON(f); err != nil {
		f.Close()
		return fmt.Errorf("write report: %w", err)
	}
	return f.Close()
}

// Write renders r as format "table" or "json".
func (r Report) Write(w io.Writer, format string) error {
	switch format {
	case "", "table":
		return r.WriteTable(w)
	case "json":
		return r.WriteJSON(w)
	}
	return fmt.Errorf("unknown output format %q (use table or json)", format)
}

func fmtMs(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
