package swdv1

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGeneratedCodeIsFresh regenerates swd.proto's Go code with the pinned
// generators (`make proto` installs them into .tools/) and fails if the
// committed files differ. It skips when protoc or the plugins are missing.
func TestGeneratedCodeIsFresh(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	here := filepath.Dir(file)
	root := filepath.Join(here, "..", "..", "..")
	path := filepath.Join(root, ".tools") + string(os.PathListSeparator) + os.Getenv("PATH")
	find := func(name string) string {
		for _, dir := range filepath.SplitList(path) {
			if p := filepath.Join(dir, name); fileExists(p) {
				return p
			}
		}
		return ""
	}
	protoc, genGo, genGRPC := find("protoc"), find("protoc-gen-go"), find("protoc-gen-go-grpc")
	if protoc == "" || genGo == "" || genGRPC == "" {
		t.Skipf("skipping: protoc (%q), protoc-gen-go (%q) or protoc-gen-go-grpc (%q) not found; `make proto` installs them", protoc, genGo, genGRPC)
	}
	out := t.TempDir()
	cmd := exec.Command(protoc, "-I", filepath.Join(root, "proto"),
		"--plugin=protoc-gen-go="+genGo, "--plugin=protoc-gen-go-grpc="+genGRPC,
		"--go_out="+out, "--go_opt=paths=source_relative",
		"--go-grpc_out="+out, "--go-grpc_opt=paths=source_relative",
		filepath.Join(root, "proto", "swd", "v1", "swd.proto"))
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "protoc: %s", b)
	for _, f := range []string{"swd.pb.go", "swd_grpc.pb.go"} {
		want, err := os.ReadFile(filepath.Join(out, "swd", "v1", f))
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(here, f))
		require.NoError(t, err)
		// The version comment names the tools' versions; compare the rest.
		if !bytes.Equal(stripVersions(want), stripVersions(got)) {
			t.Errorf("%s is stale: run `make proto` and commit the result", f)
		}
	}
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// stripVersions drops the generated header's "// \tprotoc ..." version lines.
func stripVersions(b []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		if bytes.HasPrefix(line, []byte("// \tprotoc")) || bytes.HasPrefix(line, []byte("// - protoc")) {
			continue
		}
		out = append(out, line)
	}
	return bytes.Join(out, []byte("\n"))
}
