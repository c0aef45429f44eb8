package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/dummyapp"
	"github.com/swd-project/swd/test/testutil"
)

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// In-process runs with an already-cancelled context: the command parses and
// validates its configuration, listens, and stops at once.
func TestRun(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "d.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte("mode: sleep\nname: from-file\nlog-format: json\n"), 0o600))

	cases := []struct {
		name     string
		args     []string
		env      map[string]string
		wantCode int
		wantErr  []string // substrings of stderr
	}{
		// the help text exits 0 and names the environment prefix
		{name: "help", args: []string{"--help"}, wantCode: 0},
		// an unknown flag is a usage error
		{name: "unknown flag", args: []string{"--bogus"}, wantCode: 2, wantErr: []string{"bogus", "--help"}},
		// positional arguments are a usage error
		{name: "extra args", args: []string{"serve"}, wantCode: 2, wantErr: []string{"unexpected arguments"}},
		// an invalid mode is a configuration error
		{name: "bad mode flag", args: []string{"--mode", "idle"}, wantCode: 1, wantErr: []string{`mode "idle"`}},
		// a negative worker count is a configuration error naming the flag
		{name: "bad concurrency", args: []string{"--mode", "sleep", "--concurrency", "-1"}, wantCode: 1, wantErr: []string{"concurrency -1"}},
		// the environment is read (and validated)
		{name: "bad mode env", env: map[string]string{"DUMMYAPP_MODE": "idle"}, wantCode: 1, wantErr: []string{`mode "idle"`}},
		// a value that does not parse names its env var
		{name: "bad env value", env: map[string]string{"DUMMYAPP_MAX_MS": "lots"}, wantCode: 1, wantErr: []string{"DUMMYAPP_MAX_MS", "--max-ms"}},
		// the flag wins over a bad env value
		{name: "flag over env", args: []string{"--mode", "sleep", "--listen", "127.0.0.1:0"}, env: map[string]string{"DUMMYAPP_MODE": "idle"}, wantCode: 0},
		// the config file is read from --config
		{name: "config file", args: []string{"--config", cfgFile, "--listen", "127.0.0.1:0"}, wantCode: 0, wantErr: []string{`"name":"from-file"`, `"mode":"sleep"`}},
		// env wins over the file, and DUMMYAPP_CONFIG names the file
		{name: "env over file", args: []string{"--listen", "127.0.0.1:0"}, env: map[string]string{"DUMMYAPP_CONFIG": cfgFile, "DUMMYAPP_NAME": "from-env"}, wantCode: 0, wantErr: []string{`"name":"from-env"`}},
		// a missing config file is an error
		{name: "missing config", args: []string{"--config", filepath.Join(t.TempDir(), "nope.yaml")}, wantCode: 1, wantErr: []string{"nope.yaml"}},
		// an address that cannot be listened on is a runtime error
		{name: "bad listen", args: []string{"--mode", "sleep", "--listen", "256.0.0.1:0"}, wantCode: 1, wantErr: []string{"listen"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			var stdout, stderr testutil.SyncBuffer
			code := run(ctx, c.args, &stdout, &stderr, envMap(c.env))
			assert.Equal(t, c.wantCode, code, stderr.String())
			for _, s := range c.wantErr {
				assert.Contains(t, stderr.String(), s)
			}
			if c.name == "help" {
				assert.Contains(t, stdout.String(), "DUMMYAPP_FOO_BAR")
			}
		})
	}
}

// buildBinary compiles cmd/dummyapp into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not in PATH")
	}
	bin := filepath.Join(t.TempDir(), "dummyapp")
	out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// logLine is the part of a JSON log line the test reads.
type logLine struct {
	Msg        string  `json:"msg"`
	Addr       string  `json:"addr"`
	ItersPerMs float64 `json:"iters_per_ms"`
}

// TestEndToEnd runs the real binary in each mode on a free loopback port,
// uses it, sends SIGTERM, and expects exit code 0.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	cases := []struct {
		mode string
		args []string
	}{
		// sleep mode: no calibration
		{mode: "sleep"},
		// busy mode with a short calibration, which it logs
		{mode: "busy", args: []string{"--calibration", "50ms"}},
	}
	for _, c := range cases {
		t.Run(c.mode, func(t *testing.T) {
			args := append([]string{"--listen", "127.0.0.1:0", "--log-format", "json", "--name", "e2e-" + c.mode}, c.args...)
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), "DUMMYAPP_MODE="+c.mode)
			stderr, err := cmd.StderrPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			exited := make(chan error, 1)
			t.Cleanup(func() {
				select {
				case <-exited:
				default:
					_ = cmd.Process.Kill()
				}
			})

			// read the log: the calibration line (busy), then "listening" with the address
			addrc := make(chan string, 1)
			var logs testutil.SyncBuffer
			calibrated := false
			go func() {
				sc := bufio.NewScanner(stderr)
				for sc.Scan() {
					_, _ = logs.Write(append(sc.Bytes(), '\n'))
					var l logLine
					if json.Unmarshal(sc.Bytes(), &l) != nil {
						continue
					}
					if l.Msg == "calibrated busy loop" && l.ItersPerMs > 0 {
						calibrated = true
					}
					if l.Msg == "listening" {
						addrc <- l.Addr
					}
				}
				_, _ = io.Copy(io.Discard, stderr)
				exited <- cmd.Wait()
			}()
			var base string
			select {
			case addr := <-addrc:
				base = "http://" + addr
			case <-time.After(60 * time.Second):
				t.Fatalf("no listening line; log:\n%s", logs.String())
			}
			if c.mode == "busy" {
				assert.True(t, calibrated, "busy mode logs its calibration before listening")
			}

			resp, err := http.Get(base + "/healthz")
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			assert.Equal(t, 200, resp.StatusCode)
			assert.Equal(t, "ok", string(body))

			resp, err = http.Post(base+"/work?ms=5", "text/plain", strings.NewReader("payload"))
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			assert.Equal(t, 200, resp.StatusCode)
			assert.Equal(t, "e2e-"+c.mode, resp.Header.Get(dummyapp.HeaderServedBy))
			ms, err := strconv.ParseFloat(resp.Header.Get(dummyapp.HeaderServiceMs), 64)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, ms, 5.0)

			resp, err = http.Get(base + "/work?ms=-3")
			require.NoError(t, err)
			_ = resp.Body.Close()
			assert.Equal(t, 400, resp.StatusCode)

			resp, err = http.Get(base + "/stats")
			require.NoError(t, err)
			var st dummyapp.Stats
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
			_ = resp.Body.Close()
			assert.EqualValues(t, 1, st.Served)
			assert.EqualValues(t, 7, st.BodyBytes)
			assert.Equal(t, dummyapp.Mode(c.mode), st.Mode)

			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			select {
			case err := <-exited:
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					t.Fatalf("exit code %d; log:\n%s", ee.ExitCode(), logs.String())
				}
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Fatalf("no exit after SIGTERM; log:\n%s", logs.String())
			}
			assert.Contains(t, logs.String(), `"msg":"stopped"`)
		})
	}
}
