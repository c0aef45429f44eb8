package loadgen

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Progress hears about a sweep. Sweep calls it from its own goroutine
// only, in order: SweepStarted, then per run RunStarted and RunFinished
// (with Notes in between), then SweepFinished.
type Progress interface {
	SweepStarted(runs int, total time.Duration)
	RunStarted(i int, policy string, rate float64, length time.Duration)
	RunFinished(i int, res RunResult, err error)
	Note(msg string)
	SweepFinished()
}

type nopProgress struct{}

func (nopProgress) SweepStarted(int, time.Duration)                {}
func (nopProgress) RunStarted(int, string, float64, time.Duration) {}
func (nopProgress) RunFinished(int, RunResult, error)              {}
func (nopProgress) Note(string)                                    {}
func (nopProgress) SweepFinished()                                 {}

// NewProgress returns a Progress writing to w. mode is "bar" (a progress
// bar with ETA), "lines" (one plain line per event), "none", or "auto": a
// bar when w is a terminal, lines otherwise.
func NewProgress(w io.Writer, mode string) (Progress, error) {
	switch mode {
	case "auto", "":
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			return newBarProgress(w), nil
		}
		return &lineProgress{w: w}, nil
	case "bar":
		return newBarProgress(w), nil
	case "lines":
		return &lineProgress{w: w}, nil
	case "none":
		return nopProgress{}, nil
	}
	return nil, fmt.Errorf("unknown progress mode %q (use auto, bar, lines or none)", mode)
}

// RunLine describes a finished run in one line.
func RunLine(res RunResult) string {
	r := res.Row
	s := fmt.Sprintf("%d requests, %d errors, mean %s ms, p95 %s ms, p99 %s ms", r.Requests, r.Errors, fmtMs(r.MeanMs), fmtMs(r.P95Ms), fmtMs(r.P99Ms))
	if res.MaxSendLag > 10*time.Millisecond {
		s += fmt.Sprintf(" (generator fell behind by up to %v; times still count from the schedule)", res.MaxSendLag.Round(time.Millisecond))
	}
	return s
}

// lineProgress prints plain lines (for logs and pipes).
type lineProgress struct {
	w         io.Writer
	runs      int
	remaining time.Duration
	length    time.Duration
	label     string
}

func (p *lineProgress) SweepStarted(runs int, total time.Duration) {
	p.runs, p.remaining = runs, total
	fmt.Fprintf(p.w, "%d runs, about %v of load\n", runs, total)
}

func (p *lineProgress) RunStarted(i int, pol string, rate float64, length time.Duration) {
	p.length = length
	p.label = fmt.Sprintf("[%d/%d] %s @ %s req/s", i+1, p.runs, pol, FormatRate(rate))
	fmt.Fprintf(p.w, "%s: running for %v (about %v left in the sweep)\n", p.label, length, p.remaining)
}

func (p *lineProgress) RunFinished(_ int, res RunResult, err error) {
	p.remaining -= p.length
	if err != nil {
		fmt.Fprintf(p.w, "%s: %v\n", p.label, err)
		return
	}
	fmt.Fprintf(p.w, "%s: %s\n", p.label, RunLine(res))
}

func (p *lineProgress) Note(msg string) { fmt.Fprintln(p.w, msg) }
func (p *lineProgress) SweepFinished()  {}

// barProgress draws a bar over the sweep's total load time, with ETA.
type barProgress struct {
	w     io.Writer
	bar   *progressbar.ProgressBar
	runs  int
	base  time.Duration
	len   time.Duration
	label string

	stop chan struct{}
	done chan struct{}
}

func newBarProgress(w io.Writer) *barProgress { return &barProgress{w: w} }

func (p *barProgress) SweepStarted(runs int, total time.Duration) {
	p.runs = runs
	p.bar = progressbar.NewOptions64(int64(total/time.Millisecond),
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionShowDescriptionAtLineEnd(),
		progressbar.OptionSetRenderBlankState(true),
	)
}

func (p *barProgress) RunStarted(i int, pol string, rate float64, length time.Duration) {
	p.len = length
	p.label = fmt.Sprintf("[%d/%d] %s @ %s req/s", i+1, p.runs, pol, FormatRate(rate))
	p.bar.Describe(p.label)
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	start, base := time.Now(), p.base
	go func(stop, done chan struct{}) {
		defer close(done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				el := min(time.Since(start), length)
				_ = p.bar.Set64(int64((base + el) / time.Millisecond))
			}
		}
	}(p.stop, p.done)
}

func (p *barProgress) RunFinished(_ int, res RunResult, err error) {
	close(p.stop)
	<-p.done
	p.base += p.len
	_ = p.bar.Clear()
	if err != nil {
		fmt.Fprintf(p.w, "\r%s: %v\n", p.label, err)
	} else {
		fmt.Fprintf(p.w, "\r%s: %s\n", p.label, RunLine(res))
	}
	_ = p.bar.Set64(int64(p.base / time.Millisecond))
}

func (p *barProgress) Note(msg string) {
	_ = p.bar.Clear()
	fmt.Fprintf(p.w, "\r%s\n", strings.TrimRight(msg, "\n"))
}

func (p *barProgress) SweepFinished() {
	_ = p.bar.Finish()
	fmt.Fprintln(p.w)
}
