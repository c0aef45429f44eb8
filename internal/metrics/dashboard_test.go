package metrics_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dashboardPath is the Grafana dashboard shipped in deploy/grafana.
var dashboardPath = filepath.Join("..", "..", "deploy", "grafana", "swd.json")

// targetLabels are the labels Prometheus adds to every SWD series: job and
// instance, and node/role (plus pod/namespace on Kubernetes) that the
// scrape configs in deploy/prometheus set.
var targetLabels = []string{"job", "instance", "node", "role", "pod", "namespace"}

type dashboard struct {
	Inputs []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		PluginID string `json:"pluginId"`
	} `json:"__inputs"`
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasource     `json:"datasource"`
			Current    struct {
				Value any `json:"value"`
			} `json:"current"`
		} `json:"list"`
	} `json:"templating"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    struct{ X, Y, W, H int }
	Targets    []struct {
		Expr       string      `json:"expr"`
		RefID      string      `json:"refId"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // rows
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	require.NoError(t, err)
	require.True(t, json.Valid(b), "%s is not valid JSON", dashboardPath)
	var d dashboard
	require.NoError(t, json.Unmarshal(b, &d))
	return d
}

func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// The dashboard imports cleanly: an input variable for the Prometheus data
// source, every panel and query on the data-source variable, unique panel
// ids and refIds, panels inside the 24-column grid.
func TestDashboardIsImportable(t *testing.T) {
	d := loadDashboard(t)
	assert.NotEmpty(t, d.UID)
	assert.NotEmpty(t, d.Title)
	require.Len(t, d.Inputs, 1)
	assert.Equal(t, "datasource", d.Inputs[0].Type)
	assert.Equal(t, "prometheus", d.Inputs[0].PluginID)
	input := "${" + d.Inputs[0].Name + "}"

	var dsVar string
	for _, v := range d.Templating.List {
		if v.Type == "datasource" {
			dsVar = "${" + v.Name + "}"
			assert.Equal(t, input, v.Current.Value, "the data-source variable defaults to the import input")
		}
	}
	require.NotEmpty(t, dsVar, "no data-source template variable")
	okDS := func(ds *datasource) bool {
		return ds != nil && ds.Type == "prometheus" && (ds.UID == dsVar || ds.UID == input)
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			assert.True(t, okDS(v.Datasource), "variable %s: data source %+v", v.Name, v.Datasource)
		}
	}
	ids := map[int]bool{}
	ps := allPanels(d.Panels)
	require.NotEmpty(t, ps)
	for _, p := range ps {
		assert.False(t, ids[p.ID], "panel id %d used twice", p.ID)
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		assert.NotEmpty(t, p.Title, "panel %d has no title", p.ID)
		assert.True(t, okDS(p.Datasource), "panel %q: data source %+v", p.Title, p.Datasource)
		assert.True(t, p.GridPos.W > 0 && p.GridPos.H > 0 && p.GridPos.X >= 0 && p.GridPos.X+p.GridPos.W <= 24,
			"panel %q: grid position %+v", p.Title, p.GridPos)
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			assert.NotEmpty(t, tg.Expr, "panel %q: empty query", p.Title)
			assert.False(t, refs[tg.RefID], "panel %q: refId %s used twice", p.Title, tg.RefID)
			refs[tg.RefID] = true
			assert.True(t, okDS(tg.Datasource), "panel %q: query data source %+v", p.Title, tg.Datasource)
		}
	}
}

// The dashboard shows what issue 8 asks for.
func TestDashboardCoversTheIssue(t *testing.T) {
	var exprs []string
	for _, e := range DashboardExprs(t) {
		exprs = append(exprs, e.Expr)
	}
	all := strings.Join(exprs, "\n")
	for _, want := range []string{
		"swd_queue_length", // queue length per node
		`rate(swd_transfers_total{direction="out", outcome="ok"`, // transfers per second between nodes
		"histogram_quantile(0.5, sum by (le) (rate(swd_request_duration_seconds_bucket",
		"histogram_quantile(0.99, sum by (le) (rate(swd_request_duration_seconds_bucket",
		"swd_rejections_total",        // rejections
		"swd_gossip_view_age_seconds", // gossip age
		"swd_policy_info",             // current policy
	} {
		assert.Contains(t, all, want)
	}
}

// DashboardExpr is one PromQL expression of the dashboard and where it is.
type DashboardExpr struct {
	Where string
	Expr  string
}

// DashboardExprs returns every PromQL expression of the dashboard: panel
// queries and query variables (Grafana's label_values(metric, label)).
func DashboardExprs(t *testing.T) []DashboardExpr {
	d := loadDashboard(t)
	var out []DashboardExpr
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			out = append(out, DashboardExpr{Where: "panel " + p.Title + " " + tg.RefID, Expr: tg.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			require.NoError(t, json.Unmarshal(v.Query, &s), "variable %s: query", v.Name)
			q.Query = s
		}
		out = append(out, DashboardExpr{Where: "variable " + v.Name, Expr: q.Query})
	}
	return out
}

// Every metric a dashboard expression reads exists in the golden lists,
// with a suffix its type has (_bucket/_sum/_count for histograms), and
// every label it matches or groups by exists on that metric or is a target
// label.
func TestDashboardMetricsExist(t *testing.T) {
	known := map[string]family{}
	for n, f := range golden {
		known[n] = f
	}
	for n, f := range goldenRuntime {
		known[n] = f
	}
	for _, e := range DashboardExprs(t) {
		refs := parsePromQL(e.Expr)
		if !assert.NotEmpty(t, refs.metrics, "%s: %q reads no metric", e.Where, e.Expr) {
			continue
		}
		labels := slices.Clone(targetLabels)
		for _, m := range refs.metrics {
			f, base, ok := lookupSeries(known, m.name)
			if !assert.True(t, ok, "%s: %q reads %s, which is not in the golden metric list", e.Where, e.Expr, m.name) {
				continue
			}
			mine := append(slices.Clone(targetLabels), f.Labels...)
			if strings.HasSuffix(m.name, "_bucket") {
				mine = append(mine, "le")
			}
			if f.Type == dto.MetricType_SUMMARY && m.name == base {
				mine = append(mine, "quantile")
			}
			for _, l := range m.labels {
				assert.Contains(t, mine, l, "%s: %q matches label %s, which %s does not have", e.Where, e.Expr, l, m.name)
			}
			labels = append(labels, mine...)
		}
		for _, l := range refs.grouping {
			assert.Contains(t, labels, l, "%s: %q groups by %s, which none of its metrics has", e.Where, e.Expr, l)
		}
	}
}

// lookupSeries resolves a series name to its family: histograms expose
// name_bucket, name_sum and name_count; summaries name, name_sum and
// name_count.
func lookupSeries(known map[string]family, name string) (family, string, bool) {
	if f, ok := known[name]; ok && f.Type != dto.MetricType_HISTOGRAM {
		return f, name, true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suf)
		if !ok {
			continue
		}
		f, ok := known[base]
		if !ok {
			continue
		}
		if f.Type == dto.MetricType_HISTOGRAM || (f.Type == dto.MetricType_SUMMARY && suf != "_bucket") {
			return f, base, true
		}
	}
	return family{}, "", false
}

func TestParsePromQL(t *testing.T) {
	r := parsePromQL(`histogram_quantile(0.99, sum by (node, le) (rate(swd_request_duration_seconds_bucket{node=~"$node", x!="a,b}"}[$__rate_interval]))) or vector(0)`)
	require.Len(t, r.metrics, 1)
	assert.Equal(t, "swd_request_duration_seconds_bucket", r.metrics[0].name)
	assert.Equal(t, []string{"node", "x"}, r.metrics[0].labels)
	assert.Equal(t, []string{"node", "le"}, r.grouping)

	r = parsePromQL(`label_values(swd_queue_length{role="node"}, node)`)
	require.Len(t, r.metrics, 1)
	assert.Equal(t, "swd_queue_length", r.metrics[0].name)
	assert.Equal(t, []string{"role", "node"}, r.metrics[0].labels)

	r = parsePromQL(`sum without (peer) (swd_transfers_total) / on (node) group_left (policy) swd_policy_info`)
	assert.Equal(t, []string{"swd_transfers_total", "swd_policy_info"}, []string{r.metrics[0].name, r.metrics[1].name})
	assert.Equal(t, []string{"peer", "node", "policy"}, r.grouping)
}

type seriesRef struct {
	name   string
	labels []string
}

type promRefs struct {
	metrics  []seriesRef
	grouping []string // labels of by/without/on/ignoring/group_left/group_right
}

var promKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true,
}

// promAggregators may be followed by a grouping clause before "(".
var promAggregators = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
}

var matcherRE = regexp.MustCompile(`^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)`)

// parsePromQL is a small PromQL scanner, enough to list the series and
// labels an expression reads: identifiers followed by "(" are functions or
// aggregations, grouping clauses list labels, {…} holds matchers, […]
// ranges and "…" strings are skipped. Grafana's label_values(metric, label)
// is understood as the metric plus a label.
func parsePromQL(expr string) promRefs {
	var r promRefs
	s := expr
	i := 0
	skipSpace := func() {
		for i < len(s) && unicode.IsSpace(rune(s[i])) {
			i++
		}
	}
	ident := func() string {
		j := i
		for i < len(s) && (s[i] == '_' || s[i] == ':' || unicode.IsLetter(rune(s[i])) || unicode.IsDigit(rune(s[i]))) {
			i++
		}
		return s[j:i]
	}
	// matchers reads {…} at i and returns the label names it matches.
	matchers := func() []string {
		var names []string
		i++ // {
		for i < len(s) && s[i] != '}' {
			if m := matcherRE.FindStringSubmatch(s[i:]); m != nil {
				names = append(names, m[1])
				i += len(m[0])
				skipSpace()
			}
			if i < len(s) && s[i] == '"' {
				i = skipString(s, i)
				continue
			}
			i++
		}
		i++ // }
		return names
	}
	// labelList reads (a, b) at i.
	labelList := func() []string {
		var names []string
		skipSpace()
		if i >= len(s) || s[i] != '(' {
			return nil
		}
		for i++; i < len(s) && s[i] != ')'; {
			skipSpace()
			if n := ident(); n != "" {
				names = append(names, n)
				continue
			}
			i++
		}
		i++
		return names
	}
	labelValuesArgs := 0 // >0 while inside label_values(...)
	for i < len(s) {
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(s, i)
		case c == '[':
			for i < len(s) && s[i] != ']' {
				i++
			}
			i++
		case c == '$':
			i++
			ident() // a Grafana variable outside a string
		case c == '{':
			ls := matchers()
			r.metrics = append(r.metrics, seriesRef{labels: ls}) // {…} without a name
		case unicode.IsDigit(rune(c)) || (c == '.' && i+1 < len(s) && unicode.IsDigit(rune(s[i+1]))):
			for i < len(s) && (unicode.IsDigit(rune(s[i])) || strings.ContainsRune(".eE+-xXabcdefABCDEFsmhdwy", rune(s[i]))) {
				i++
			}
		case c == '_' || c == ':' || unicode.IsLetter(rune(c)):
			name := ident()
			j := i
			skipSpace()
			switch {
			case promKeywords[strings.ToLower(name)]:
				if name == "by" || name == "without" || name == "on" || name == "ignoring" || name == "group_left" || name == "group_right" {
					r.grouping = append(r.grouping, labelList()...)
				}
			case promAggregators[name] && (strings.HasPrefix(s[i:], "by") || strings.HasPrefix(s[i:], "without")):
				// sum by (…) (…): the grouping clause comes next.
			case i < len(s) && s[i] == '(':
				if name == "label_values" {
					labelValuesArgs = 1
				}
				i++
			case labelValuesArgs == 2:
				// label_values' second argument: a label of the metric.
				if n := len(r.metrics); n > 0 {
					r.metrics[n-1].labels = append(r.metrics[n-1].labels, name)
				}
				labelValuesArgs = 0
			default:
				ref := seriesRef{name: name}
				if i < len(s) && s[i] == '{' {
					ref.labels = matchers()
				} else {
					i = j
				}
				r.metrics = append(r.metrics, ref)
			}
		case c == ',' && labelValuesArgs == 1:
			labelValuesArgs = 2
			i++
		default:
			i++
		}
	}
	// Drop nameless selectors: the dashboard always names its metrics.
	named := r.metrics[:0]
	for _, m := range r.metrics {
		if m.name != "" {
			named = append(named, m)
		}
	}
	r.metrics = named
	return r
}

func skipString(s string, i int) int {
	q := s[i]
	for i++; i < len(s); i++ {
		if s[i] == '\\' && q != '`' {
			i++
			continue
		}
		if s[i] == q {
			return i + 1
		}
	}
	return i
}
