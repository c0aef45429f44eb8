package loadgen

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/swd-project/swd/internal/stats"
)

// WritePlots writes r's PNG plots into dir and returns their paths:
// rt_mean.png and rt_p<x>.png (response time against rate, one line per
// policy; failed or missing points are left out) and, when r has
// capacities, capacity.png (one group of bars per percentile, one bar per
// policy; a "≥ highest" capacity is drawn at the highest rate, a "< lowest"
// one as an empty bar).
func (r Report) WritePlots(dir string) ([]string, error) {
	if len(r.Rows) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create plot directory: %w", err)
	}
	var files []string
	stats := []struct {
		file, title string
		get         func(Row) float64
	}{{"rt_mean.png", "mean response time", func(row Row) float64 { return row.MeanMs }}}
	for _, p := range r.Percentiles {
		p := p
		stats = append(stats, struct {
			file, title string
			get         func(Row) float64
		}{"rt_p" + strings.ReplaceAll(FormatRate(p), ".", "") + ".png", PercentileName(p) + " percentile response time",
			func(row Row) float64 { v, _ := row.PRT(p); return v }})
	}
	for _, s := range stats {
		path := filepath.Join(dir, s.file)
		if err := r.plotStat(path, s.title, s.get); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	if len(r.Capacities) > 0 {
		path := filepath.Join(dir, "capacity.png")
		if err := r.plotCapacities(path); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

func (r Report) plotStat(path, title string, get func(Row) float64) error {
	p := plot.New()
	p.Title.Text = title
	if r.Workload != nil {
		p.Title.Text += " (" + r.Workload.Name + ")"
	}
	p.X.Label.Text = "arrival rate (req/s)"
	p.Y.Label.Text = "response time (ms)"
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	for i, pol := range Policies(r.Rows) {
		var xys plotter.XYs
		for _, row := range r.Rows {
			v := get(row)
			if row.Policy != pol || row.Failed(r.MaxErrorRate) || math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			xys = append(xys, plotter.XY{X: row.Rate, Y: v})
		}
		if len(xys) == 0 {
			continue
		}
		sortXYs(xys)
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		line.Color = seriesColor(i)
		line.Dashes = plotutil.Dashes(i)
		points.Color = seriesColor(i)
		points.Shape = plotutil.Shape(i)
		p.Add(line, points)
		p.Legend.Add(pol, line, points)
	}
	if err := p.Save(16*vg.Centimeter, 11*vg.Centimeter, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

func (r Report) plotCapacities(path string) error {
	p := plot.New()
	p.Title.Text = "percentile capacity"
	if r.Workload != nil {
		p.Title.Text += " (" + r.Workload.Name + ")"
	}
	p.Y.Label.Text = "capacity (req/s)"
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	pols := Policies(r.Rows)
	names := make([]string, len(r.Limits))
	for i, l := range r.Limits {
		names[i] = fmt.Sprintf("%s ≤ %sms", PercentileName(l.Percentile), fmtMs(l.Ms))
	}
	width := vg.Points(float64(60) / float64(max(1, len(pols))))
	top := 0.0
	for i, pol := range pols {
		vals := make(plotter.Values, len(r.Limits))
		for j, l := range r.Limits {
			for _, c := range r.Capacities {
				if c.Policy == pol && c.Percentile == l.Percentile && c.Bound != stats.Below {
					vals[j] = c.Rate
				}
			}
		}
		for _, v := range vals {
			top = max(top, v)
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		bars.Color = seriesColor(i)
		bars.LineStyle.Width = vg.Length(0)
		bars.Offset = width * vg.Length(float64(i)-float64(len(pols)-1)/2)
		p.Add(bars)
		p.Legend.Add(pol, bars)
	}
	p.NominalX(names...)
	p.Y.Min = 0
	// Headroom above the bars for the legend, one line per system.
	// (rounded up to a multiple of 100 so the ticks stay whole numbers).
	p.Y.Max = math.Ceil(top*(1.1+0.07*float64(len(pols)))/100) * 100
	if err := p.Save(16*vg.Centimeter, 11*vg.Centimeter, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// palette is Tableau's ten categorical colours: distinct for up to ten
// systems (plotutil's default has seven, so an eighth repeated the first).
var palette = []color.RGBA{
	{0x4e, 0x79, 0xa7, 0xff}, {0xf2, 0x8e, 0x2b, 0xff}, {0xe1, 0x57, 0x59, 0xff}, {0x76, 0xb7, 0xb2, 0xff},
	{0x59, 0xa1, 0x4f, 0xff}, {0xed, 0xc9, 0x48, 0xff}, {0xb0, 0x7a, 0xa1, 0xff}, {0xff, 0x9d, 0xa7, 0xff},
	{0x9c, 0x75, 0x5f, 0xff}, {0xba, 0xb0, 0xac, 0xff},
}

func seriesColor(i int) color.Color { return palette[i%len(palette)] }

func sortXYs(xys plotter.XYs) {
	for i := 1; i < len(xys); i++ {
		for j := i; j > 0 && xys[j].X < xys[j-1].X; j-- {
			xys[j], xys[j-1] = xys[j-1], xys[j]
		}
	}
}

// WritePlot writes r as a PNG at path in the shape of paper 001's figure:
// completed sessions per second against the number of clients, one line
// per admission mode, with the sessions that failed after their first
// page per second as a dashed line of the same colour where there were
// any.
func (r SessionReport) WritePlot(path string) error {
	if len(r.Rows) == 0 {
		return fmt.Errorf("plot %s: no runs", path)
	}
	p := plot.New()
	p.Title.Text = "session throughput"
	if r.Title != "" {
		p.Title.Text = r.Title
	}
	p.X.Label.Text = "clients"
	p.Y.Label.Text = "sessions per second"
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	for i, s := range r.Summaries() {
		var done, failed plotter.XYs
		var anyFailed bool
		for _, row := range r.Rows {
			if row.Mode != s.Mode {
				continue
			}
			done = append(done, plotter.XY{X: float64(row.Clients), Y: row.SessionsPerSec})
			f := 0.0
			if row.Window > 0 {
				f = float64(row.FailedAfterStart) / row.Window.Seconds()
			}
			anyFailed = anyFailed || f > 0
			failed = append(failed, plotter.XY{X: float64(row.Clients), Y: f})
		}
		sortXYs(done)
		sortXYs(failed)
		line, points, err := plotter.NewLinePoints(done)
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		line.Color, points.Color, points.Shape = seriesColor(i), seriesColor(i), plotutil.Shape(i)
		p.Add(line, points)
		p.Legend.Add(s.Mode+" completed", line, points)
		if anyFailed {
			fl, err := plotter.NewLine(failed)
			if err != nil {
				return fmt.Errorf("plot %s: %w", path, err)
			}
			fl.Color = seriesColor(i)
			fl.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(fl)
			p.Legend.Add(s.Mode+" failed after start", fl)
		}
	}
	if err := p.Save(16*vg.Centimeter, 11*vg.Centimeter, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}
