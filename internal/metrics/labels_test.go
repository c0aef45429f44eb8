package metrics_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/metrics"
)

// vecFields maps each labelled field of metrics.Metrics to its family and
// the family's label names in WithLabelValues order.
var vecFields = map[string]struct {
	family string
	labels []string
}{
	"Requests":         {"swd_requests_total", []string{"outcome"}},
	"Transfers":        {"swd_transfers_total", []string{"direction", "peer", "outcome"}},
	"TransferDuration": {"swd_transfer_duration_seconds", []string{"outcome"}},
	"PolicyInfo":       {"swd_policy_info", []string{"policy", "epoch"}},
	"NodeInfo":         {"swd_node_info", []string{"node", "role", "version"}},
	"Rejections":       {"swd_rejections_total", []string{"reason"}},
}

// constValues are the metrics package's label-value constants by name.
var constValues = map[string]string{
	"OutcomeLocal": metrics.OutcomeLocal, "OutcomeRemote": metrics.OutcomeRemote,
	"OutcomeRejected": metrics.OutcomeRejected, "OutcomeTimedOut": metrics.OutcomeTimedOut,
	"OutcomeClientGone": metrics.OutcomeClientGone, "OutcomeFailed": metrics.OutcomeFailed,
	"DirOut": metrics.DirOut, "DirIn": metrics.DirIn,
	"TransferOK": metrics.TransferOK, "TransferRefused": metrics.TransferRefused,
	"TransferFailed": metrics.TransferFailed, "TransferRetried": metrics.TransferRetried,
	"TransferRejected": metrics.TransferRejected,
}

// reviewed lists the non-constant label-value expressions that were
// checked by hand to be bounded, per family and label:
//   - peer: a cluster member's name (a policy hand-off target, a
//     dispatcher backend, or a transfer sender the gRPC server admitted
//     only after its membership check), never a client-supplied string;
//   - outcome: a local variable assigned only from the constants above;
//   - o.transfer: proxy's classifyForward result, built only from the
//     Transfer* constants (its table test pins every value);
//   - reason(err): proxy's mapping of errors to fixed reasons (its return
//     values are checked below);
//   - policy name and epoch: SetPolicy's arguments; Reset keeps one series;
//   - o, r in metrics.New: loops over the package's fixed outcome and
//     reason lists, creating their series up front;
//   - node, role, version: SetNodeInfo's arguments (the daemon's own
//     name, role and build version); Reset keeps one series.
//
// Adding an expression here needs the same review: a label value must
// never come from request data (paths, headers, IDs, client addresses).
var reviewed = map[string]map[string][]string{
	"swd_requests_total":            {"outcome": {"outcome", "o"}},
	"swd_transfers_total":           {"peer": {"peer", "in.From", "b.Name"}, "outcome": {"outcome", "o.transfer"}},
	"swd_transfer_duration_seconds": {"outcome": {"outcome", "o", "o.transfer"}},
	"swd_rejections_total":          {"reason": {"reason(err)", "r"}},
	"swd_node_info":                 {"node": {"node"}, "role": {"role"}, "version": {"version"}},
	"swd_policy_info":               {"policy": {"name"}, "epoch": {"strconv.FormatInt(epoch, 10)"}},
}

// Every WithLabelValues call on an SWD family in the daemon's code passes,
// for each label, a fixed value from the bounded set or a reviewed bounded
// expression: label cardinality cannot grow with traffic.
func TestLabelValuesAreBounded(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	calls := 0
	var reasonReturns []string
	for _, dir := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if fd, ok := n.(*ast.FuncDecl); ok && fd.Name.Name == "reason" && filepath.Base(filepath.Dir(path)) == "proxy" {
					reasonReturns = append(reasonReturns, stringReturns(t, fd)...)
				}
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				recv, ok := sel.X.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				vf, ok := vecFields[recv.Sel.Name]
				if !ok {
					return true
				}
				pos := fset.Position(call.Pos())
				switch sel.Sel.Name {
				case "WithLabelValues", "GetMetricWithLabelValues":
				case "With", "GetMetricWith", "CurryWith", "MustCurryWith":
					t.Errorf("%s: %s.%s: use WithLabelValues with bounded values so this test can check them", pos, recv.Sel.Name, sel.Sel.Name)
					return true
				default:
					return true
				}
				calls++
				if !assert.Len(t, call.Args, len(vf.labels), "%s: %s takes %v", pos, vf.family, vf.labels) {
					return true
				}
				for i, arg := range call.Args {
					checkLabelArg(t, pos, vf.family, vf.labels[i], arg)
				}
				return true
			})
			return nil
		})
		require.NoError(t, err)
	}
	assert.Greater(t, calls, 10, "found too few WithLabelValues calls: is the source tree where this test expects it?")
	require.NotEmpty(t, reasonReturns, "proxy's reason() not found or returns no string literal")
	allowed := boundedValues["swd_rejections_total"]["reason"]
	for _, r := range reasonReturns {
		assert.Contains(t, allowed, r, "proxy's reason() returns %q, not in the bounded set", r)
	}
}

func checkLabelArg(t *testing.T, pos token.Position, family, label string, arg ast.Expr) {
	t.Helper()
	allowed := boundedValues[family][label]
	var name string
	switch a := arg.(type) {
	case *ast.BasicLit:
		v, err := strconv.Unquote(a.Value)
		if assert.NoError(t, err, "%s", pos) {
			assert.Contains(t, allowed, v, "%s: %s{%s=%q}: value not in the bounded set", pos, family, label, v)
		}
		return
	case *ast.SelectorExpr:
		if pkg, ok := a.X.(*ast.Ident); ok && pkg.Name == "metrics" {
			name = a.Sel.Name
		}
	case *ast.Ident:
		if _, ok := constValues[a.Name]; ok {
			name = a.Name
		}
	}
	if name != "" {
		v, ok := constValues[name]
		if assert.True(t, ok, "%s: metrics.%s is not a known label constant", pos, name) {
			assert.Contains(t, allowed, v, "%s: %s{%s=metrics.%s}: value not in the bounded set", pos, family, label, name)
		}
		return
	}
	var b bytes.Buffer
	require.NoError(t, printer.Fprint(&b, token.NewFileSet(), arg))
	expr := b.String()
	assert.True(t, slices.Contains(reviewed[family][label], expr),
		"%s: %s{%s=%s}: not a constant and not a reviewed bounded expression (see reviewed in labels_test.go)", pos, family, label, expr)
}

// stringReturns lists the string literals a function returns.
func stringReturns(t *testing.T, fd *ast.FuncDecl) []string {
	var out []string
	ast.Inspect(fd, func(n ast.Node) bool {
		ret, ok := n.(*ast.ReturnStmt)
		if !ok {
			return true
		}
		for _, r := range ret.Results {
			lit, ok := r.(*ast.BasicLit)
			if !assert.True(t, ok && lit.Kind == token.STRING, "reason() must return string literals only") {
				continue
			}
			v, _ := strconv.Unquote(lit.Value)
			out = append(out, v)
		}
		return true
	})
	return out
}
