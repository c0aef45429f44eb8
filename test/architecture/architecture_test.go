// Package architecture checks that what docs/architecture.md says about the
// code's layout is what the code is: the package table and its dependency
// column against `go list`, and the layout rules for benchmark and study
// programs against the tree and the Makefile; and that the repository
// tracks no build output.
//
// Concurrency: the tests only read files and run `go list` and `git ls-files`.
package architecture

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/swd-project/swd/"

var mainPackage = regexp.MustCompile(`(?m)^package main$`)

// repoRoot is the repository's top directory, found from this file's path.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// row is one line of the package table.
type row struct {
	pkg  string   // "internal/node", "cmd/swd", "proto/swd/v1"
	deps []string // short names: "node", "loadgen/cli", "proto"
}

// tableRows parses the package table of docs/architecture.md: the lines
// after the "| package | concern | depends on |" header up to the first
// line that is not a table row.
func tableRows(t *testing.T, doc string) []row {
	t.Helper()
	var rows []row
	in := false
	sc := bufio.NewScanner(strings.NewReader(doc))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "| package | concern | depends on |" {
			in = true
			continue
		}
		if !in || line == "|---|---|---|" {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		require.Len(t, cells, 3, "table row %q", line)
		r := row{pkg: strings.Trim(strings.TrimSpace(cells[0]), "`")}
		if deps := strings.TrimSpace(cells[2]); deps != "–" {
			for _, d := range strings.Split(deps, ",") {
				r.deps = append(r.deps, strings.TrimSpace(d))
			}
		}
		rows = append(rows, r)
	}
	require.NotEmpty(t, rows, "no package table in docs/architecture.md")
	return rows
}

// shortName is how the table names a package: without the module and
// without "internal/"; the generated protobuf package is "proto".
func shortName(path string) string {
	path = strings.TrimPrefix(path, module)
	if path == "proto/swd/v1" {
		return "proto"
	}
	return strings.TrimPrefix(path, "internal/")
}

// listed is one package as `go list -json` reports it.
type listed struct {
	ImportPath string
	Imports    []string
}

// goList lists the module's packages and their non-test imports.
func goList(t *testing.T) map[string][]string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("skipping: no go command on PATH to list packages with: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-json", "./...")
	cmd.Dir = repoRoot()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", stderr.String())
	pkgs := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		var deps []string
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module) {
				deps = append(deps, shortName(imp))
			}
		}
		pkgs[strings.TrimPrefix(p.ImportPath, module)] = deps
	}
	return pkgs
}

// TestDependencyTable: every package outside test/ has a row in
// docs/architecture.md, every row is a package, each row's "depends on" is
// exactly the package's imports of SWD packages, and each of those has its
// own row above it (data flows one way, down the table).
func TestDependencyTable(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot(), "docs", "architecture.md"))
	require.NoError(t, err)
	rows := tableRows(t, string(doc))
	pkgs := goList(t)

	above := map[string]bool{}
	inTable := map[string]bool{}
	for _, r := range rows {
		if r.pkg == "test/..." {
			continue // tests and programs under test/ may use anything above
		}
		inTable[r.pkg] = true
		deps, ok := pkgs[r.pkg]
		if !assert.True(t, ok, "docs/architecture.md lists %s, which is not a package", r.pkg) {
			continue
		}
		assert.ElementsMatch(t, deps, r.deps, "%s: the table's \"depends on\" is not what the package imports", r.pkg)
		for _, d := range r.deps {
			assert.True(t, above[d], "%s depends on %s, which is not listed above it", r.pkg, d)
		}
		above[shortName(r.pkg)] = true
	}
	for pkg := range pkgs {
		if strings.HasPrefix(pkg, "test/") {
			continue
		}
		assert.True(t, inTable[pkg], "package %s has no row in docs/architecture.md's table", pkg)
	}
}

// TestBenchAndStudyLayout: benchmark programs are main packages directly
// under test/bench/<name>, studies under test/study/<name>, and every
// benchmark program is run by a make target (the Makefile or a script it
// calls names ./test/bench/<name>).
func TestBenchAndStudyLayout(t *testing.T) {
	root := repoRoot()
	// runners is what make targets run: the Makefile and the scripts
	// under scripts/ that targets call.
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	runners := string(makefile)
	scripts, err := filepath.Glob(filepath.Join(root, "scripts", "*"))
	require.NoError(t, err)
	for _, f := range scripts {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		runners += string(b)
	}
	for _, dir := range []string{"bench", "study"} {
		entries, err := os.ReadDir(filepath.Join(root, "test", dir))
		require.NoError(t, err)
		require.NotEmpty(t, entries, "test/%s is empty", dir)
		for _, e := range entries {
			if !e.IsDir() {
				assert.Failf(t, "stray file", "test/%s/%s: only program directories belong here", dir, e.Name())
				continue
			}
			pkgDir := filepath.Join(root, "test", dir, e.Name())
			files, err := filepath.Glob(filepath.Join(pkgDir, "*.go"))
			require.NoError(t, err)
			if !assert.NotEmpty(t, files, "test/%s/%s holds no Go program", dir, e.Name()) {
				continue
			}
			src, err := os.ReadFile(files[0])
			require.NoError(t, err)
			assert.True(t, mainPackage.Match(src), "test/%s/%s must be a main package", dir, e.Name())
			if dir == "bench" {
				assert.True(t, strings.Contains(runners, "./test/bench/"+e.Name()),
					"test/bench/%s has no make target running it (in the Makefile or a script under scripts/)", e.Name())
			}
		}
	}
}

// maxTrackedBytes bounds a file the repository tracks: source, docs, plots
// and short measurement logs fit easily; a binary or a raw result dump does
// not belong in the repository (make and scripts can make them again).
const maxTrackedBytes = 512 << 10

// TestNoBuildOutputTracked: no tracked file is an executable build output
// (ELF, Mach-O or PE) or larger than maxTrackedBytes. A `go build` in the
// repository's root once committed two 20 MB binaries.
func TestNoBuildOutputTracked(t *testing.T) {
	root := repoRoot()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout with git on PATH (%v): nothing to check", err)
	}
	magics := [][]byte{{0x7f, 'E', 'L', 'F'}, {0xcf, 0xfa, 0xed, 0xfe}, {'M', 'Z'}}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		path := filepath.Join(root, name)
		fi, err := os.Lstat(path)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or a link
		}
		assert.LessOrEqual(t, fi.Size(), int64(maxTrackedBytes), "%s is %d bytes: too big to track", name, fi.Size())
		f, err := os.Open(path)
		require.NoError(t, err)
		head := make([]byte, 4)
		n, _ := io.ReadFull(f, head)
		_ = f.Close()
		for _, m := range magics {
			if n >= len(m) && bytes.Equal(head[:len(m)], m) {
				assert.Failf(t, "build output tracked", "%s is an executable (magic %x): delete it and ignore it", name, m)
			}
		}
	}
}
