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

// labelTypes are the metrics package's label-value types. A value of one
// of them can only be one of the package's constants: no code outside the
// package converts to them (checked below), so label values are bounded by
// construction.
var labelTypes = map[string]string{
	"Outcome":         "swd_requests_total/outcome",
	"Direction":       "swd_transfers_total/direction",
	"TransferOutcome": "swd_transfers_total/outcome",
	"Reason":          "swd_rejections_total/reason",
	"Placement":       "swd_affinity_placements_total/placement",
	"PullResult":      "swd_pulls_total/result",
	"Edge":            "swd_request_body_bytes/edge",
	"Body":            "swd_transfer_bytes_total/body",
	"SizeClass":       "swd_transfer_handoff_seconds/size",
}

// reviewedArgs lists, per recorder method whose arguments are free
// strings, the argument expressions checked by hand to be bounded:
//   - peer: a cluster member's name (a policy hand-off target, a
//     dispatcher backend, or a transfer sender the gRPC server admitted
//     only after its membership check), never a client-supplied string;
//   - policy name and epoch: the policy in force (ApplyPolicy has looked
//     the name up in the registry); Reset keeps one series;
//   - node, role, version: the daemon's own name, role and build version.
//
// Adding an expression here needs the same review: a label value must
// never come from request data (paths, headers, IDs, client addresses).
var reviewedArgs = map[string][][]string{
	"TransferOut": {{"peer", "b.Name"}},
	"TransferIn":  {{"peer", "in.From"}},
	// TransferFlow's second argument is the same peer as TransferOut's or
	// TransferIn's; SetPeers gets the members' names from the cluster.
	"TransferFlow": {{"metrics.DirOut", "metrics.DirIn"}, {"peer", "in.From"}},
	"SetPeers":     {{"peers"}},
	"SetPolicy":    {{"p.Name", "name"}, {"0", "epoch"}},
	"SetNodeInfo":  {{"cfg.NodeName"}, {"cfg.Role"}, {"Version"}},
}

// reviewedInside lists the expressions the metrics package itself passes
// to WithLabelValues: its typed parameters as strings, its own constants,
// and the reviewed free strings above.
var reviewedInside = []string{
	"string(o)", "string(r)", "string(p)", "string(DirOut)", "string(DirIn)", "string(TransferRefused)",
	"peer", "unknownPeer", "node", "role", "version", "name", "strconv.FormatInt(epoch, 10)",
	"string(e)", "string(d)", "string(c)", "string(b)", "p", "string(BodyRequest)", "string(BodyResponse)",
	"string(ClassOf(bodyBytes))",
	// swd_pull_idle_seconds/filled: a bool, so "true" or "false".
	"strconv.FormatBool(filled)", `"true"`, `"false"`,
}

// walk parses every non-test Go file under internal/ and cmd/.
func walk(t *testing.T, f func(path string, file *ast.File)) {
	t.Helper()
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	for _, dir := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			file, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			f(path, file)
			return nil
		})
		require.NoError(t, err)
	}
}

func exprString(t *testing.T, e ast.Expr) string {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, printer.Fprint(&b, token.NewFileSet(), e))
	return b.String()
}

// Every label value the daemon records is bounded: typed values come only
// from the metrics package's constants, free strings only from reviewed
// expressions, and inside the package WithLabelValues sees nothing else.
func TestLabelValuesAreBounded(t *testing.T) {
	recorderCalls, insideCalls := 0, 0
	walk(t, func(path string, file *ast.File) {
		inside := filepath.Base(filepath.Dir(path)) == "metrics"
		recorder := slices.ContainsFunc(file.Imports, func(s *ast.ImportSpec) bool {
			return s.Path.Value == `"github.com/swd-project/swd/internal/metrics"`
		})
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pos := path
			// No conversion to a label type outside the package.
			if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "metrics" {
				if _, typed := labelTypes[sel.Sel.Name]; typed {
					t.Errorf("%s: metrics.%s(%s): label values must be the package's constants", pos, sel.Sel.Name, exprString(t, call.Args[0]))
				}
				return true
			}
			if inside {
				switch sel.Sel.Name {
				case "WithLabelValues", "GetMetricWithLabelValues":
					insideCalls++
					for _, a := range call.Args {
						assert.Contains(t, reviewedInside, exprString(t, a), "%s: WithLabelValues(%s)", pos, exprString(t, a))
					}
				case "With", "GetMetricWith", "CurryWith", "MustCurryWith":
					t.Errorf("%s: %s: use WithLabelValues with reviewed values so this test can check them", pos, sel.Sel.Name)
				}
				return true
			}
			// Recorder calls: on a *metrics.Metrics, which SWD's code
			// holds in a field or variable named m.
			args, ok := reviewedArgs[sel.Sel.Name]
			recv := strings.Split(exprString(t, sel.X), ".")
			if !ok || !recorder || recv[len(recv)-1] != "m" {
				return true
			}
			recorderCalls++
			for i, allowed := range args {
				e := exprString(t, call.Args[i])
				assert.True(t, slices.Contains(allowed, e), "%s: %s argument %d is %s, not a reviewed bounded expression (see reviewedArgs)", pos, sel.Sel.Name, i+1, e)
			}
			return true
		})
	})
	assert.GreaterOrEqual(t, recorderCalls, 8, "found too few recorder calls: is the source tree where this test expects it?")
	assert.GreaterOrEqual(t, insideCalls, 8, "found too few WithLabelValues calls in the metrics package")
}

// Every constant of a label type is in its exported list (which creates the
// series up front) and in the golden bounded set, and the lists hold
// nothing else.
func TestLabelConstantsListed(t *testing.T) {
	consts := map[string][]string{} // label type -> constant values
	walk(t, func(path string, file *ast.File) {
		if filepath.Base(filepath.Dir(path)) != "metrics" {
			return
		}
		for _, d := range file.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				typ, ok := vs.Type.(*ast.Ident)
				if !ok {
					continue
				}
				if _, labelled := labelTypes[typ.Name]; !labelled {
					continue
				}
				for _, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					require.True(t, ok, "%s constants must be string literals", typ.Name)
					s, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					consts[typ.Name] = append(consts[typ.Name], s)
				}
			}
		}
	})
	bounded := func(key string) []string {
		family, label, _ := strings.Cut(key, "/")
		return boundedValues[family][label]
	}
	lists := map[string][]string{
		"Outcome":         strs(metrics.Outcomes...),
		"Direction":       strs(metrics.DirOut, metrics.DirIn),
		"TransferOutcome": strs(metrics.TransferOutcomes...),
		"Reason":          metrics.RejectionReasons,
		"Placement":       strs(metrics.Placements...),
		"PullResult":      strs(metrics.PullResults...),
		"Edge":            strs(metrics.Edges...),
		"Body":            strs(metrics.BodyKinds...),
		"SizeClass":       strs(metrics.SizeClasses...),
	}
	for typ, key := range labelTypes {
		require.NotEmpty(t, consts[typ], "no constants of type %s found", typ)
		assert.ElementsMatch(t, consts[typ], lists[typ], "%s: constants and exported list differ", typ)
		for _, v := range consts[typ] {
			assert.Contains(t, bounded(key), v, "%s %q is not in the golden bounded set of %s", typ, v, key)
		}
	}
	assert.ElementsMatch(t, strs(metrics.Reasons...), metrics.RejectionReasons)
}
