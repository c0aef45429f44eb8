package cli

import (
	"strconv"

	"github.com/spf13/pflag"

	"github.com/swd-project/swd/internal/affinity"
	"github.com/swd-project/swd/loadgen"
)

// keyFlags are the keyed workload (paper 000: key affinity, cache-aware
// order) and, for --local, the swd and dummyapp flags that go with it.
type keyFlags struct {
	keys     int
	dist     string
	zipfS    float64
	header   string
	apps     []string
	affinity string
	factor   float64
	cohort   bool
	cohortN  int
	cacheN   int
	missMs   float64
}

func (k *keyFlags) add(fs *pflag.FlagSet) {
	d := loadgen.DefaultKeySpec()
	fs.IntVar(&k.keys, "keys", 0, "keyed workload: every request carries one of N user keys (user-0 ...) in --key-header; 0: no keys")
	fs.StringVar(&k.dist, "key-dist", d.Dist, "how keys are drawn: uniform, or zipf (a few hot keys)")
	fs.Float64Var(&k.zipfS, "key-zipf-s", d.ZipfS, "zipf exponent of --key-dist zipf (above 1; larger: hotter keys)")
	fs.StringVar(&k.header, "key-header", d.Header, "header carrying the key (the apps' cache and HAProxy's hash read it)")
	fs.StringSliceVar(&k.apps, "apps", nil, "apps' host:port addresses whose /stats cache counters give the hit ratio (--local: its apps, with --cache-size)")
	fs.StringVar(&k.affinity, "affinity", "", "--local: every swd's --affinity (header:NAME or cookie:NAME): keyed requests run on their home node")
	fs.Float64Var(&k.factor, "affinity-factor", 0, "--local: every swd's --affinity-factor (0: swd's default)")
	fs.BoolVar(&k.cohort, "cohort", false, "--local: every swd's --cohort (cache-aware order; needs --affinity)")
	fs.IntVar(&k.cohortN, "cohort-cache", 0, "--local: every swd's --cohort-cache (0: --cache-size)")
	fs.IntVar(&k.cacheN, "cache-size", 0, "--local: every dummyapp's --cache-size (an LRU of keys; 0: no cache)")
	fs.Float64Var(&k.missMs, "miss-ms", 0, "--local: every dummyapp's --miss-ms (extra service time of a cache miss)")
}

// spec checks the flags and returns the keyed workload.
func (k *keyFlags) spec(fs *pflag.FlagSet, local bool) (loadgen.KeySpec, error) {
	ks := loadgen.DefaultKeySpec()
	ks.N, ks.Dist, ks.ZipfS, ks.Header = k.keys, k.dist, k.zipfS, k.header
	src, err := affinity.ParseSource(k.affinity)
	if err != nil {
		return ks, usagef("--affinity: %v", err)
	}
	ks.Source = src
	if err := ks.Validate(); err != nil {
		return ks, usageError{err}
	}
	for _, n := range []string{"affinity", "affinity-factor", "cohort", "cohort-cache", "cache-size", "miss-ms"} {
		if changed(fs, n) && !local {
			return ks, usagef("--%s sets the flags of a cluster loadgen starts: it needs --local N", n)
		}
	}
	switch {
	case k.cohort && !src.Enabled():
		return ks, usagef("--cohort orders requests by key: give --affinity too (e.g. --affinity header:%s)", ks.Header)
	case src.Kind == affinity.KindHeader && src.Name != ks.Header:
		return ks, usagef("--affinity %s reads another header than the keys are sent in (--key-header %s)", src, ks.Header)
	case k.cacheN < 0 || k.cohortN < 0 || k.missMs < 0:
		return ks, usagef("--cache-size, --cohort-cache and --miss-ms must not be negative")
	case len(k.apps) > 0 && local:
		return ks, usagef("--apps names another cluster's apps: --local reads its own")
	}
	for _, a := range k.apps {
		if _, err := loadgen.NormalizeBase(a); err != nil {
			return ks, usageError{err}
		}
	}
	return ks, nil
}

// localArgs are swdctl's extra arguments for a local cluster: the swd and
// dummyapp flags these settings give.
func (k *keyFlags) localArgs() []string {
	var args []string
	swd := func(flag, v string) { args = append(args, "--node-arg=--"+flag+"="+v) }
	app := func(flag, v string) { args = append(args, "--app-arg=--"+flag+"="+v) }
	if k.affinity != "" {
		swd("affinity", k.affinity)
	}
	if k.factor > 0 {
		swd("affinity-factor", strconv.FormatFloat(k.factor, 'g', -1, 64))
	}
	if k.cohort {
		swd("cohort", "true")
		if n := k.cohortCacheSize(); n > 0 {
			swd("cohort-cache", strconv.Itoa(n))
		}
	}
	if k.cacheN > 0 {
		app("cache-size", strconv.Itoa(k.cacheN))
		app("miss-ms", strconv.FormatFloat(k.missMs, 'g', -1, 64))
		app("cache-header", k.header)
	}
	return args
}

// cohortCacheSize is --cohort-cache, or --cache-size when not given.
func (k *keyFlags) cohortCacheSize() int {
	if k.cohortN > 0 {
		return k.cohortN
	}
	return k.cacheN
}

// hitBlock is the cache hit ratio of every run whose apps counted lookups.
func hitBlock(runs []loadgen.RunResult) *loadgen.Block {
	b := loadgen.Block{Title: "cache hit ratio in the measured window (apps' /stats)"}
	for _, r := range runs {
		if r.Cache == nil || r.Cache.Hits+r.Cache.Misses == 0 {
			continue
		}
		b.Cells = append(b.Cells, loadgen.Cell{Policy: r.Row.Policy, Rate: r.Row.Rate, Value: r.Cache.HitRatio()})
	}
	if len(b.Cells) == 0 {
		return nil
	}
	return &b
}
