package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// settings is a flag set with one flag of each kind the binaries use.
type settings struct {
	fs       *pflag.FlagSet
	listen   *string
	limit    *int
	timeout  *time.Duration
	verbose  *bool
	ratio    *float64
	join     *[]string
	rates    *[]int
	headers  *[]string // stringArray: no comma splitting
	nodeName *string
}

func newSettings() *settings {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.SetOutput(&strings.Builder{})
	s := &settings{fs: fs}
	s.listen = fs.String("listen", ":8080", "")
	s.limit = fs.Int("queue-limit", 1024, "")
	s.timeout = fs.Duration("queue-timeout", 30*time.Second, "")
	s.verbose = fs.BoolP("verbose", "v", false, "")
	s.ratio = fs.Float64("ratio", 0.5, "")
	s.join = fs.StringSlice("join", nil, "")
	s.rates = fs.IntSlice("rates", []int{40}, "")
	s.headers = fs.StringArray("header", nil, "")
	s.nodeName = fs.String("node-name", "", "")
	AddConfigFlag(fs)
	return s
}

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "swd.yaml")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

func TestEnvName(t *testing.T) {
	cases := []struct {
		prefix, flag, want string
	}{
		// the interfaces spec's example
		{"SWD", "queue-limit", "SWD_QUEUE_LIMIT"},
		// a trailing underscore on the prefix is not doubled
		{"SWD_", "queue-limit", "SWD_QUEUE_LIMIT"},
		// dummyapp's prefix
		{"DUMMYAPP", "log-format", "DUMMYAPP_LOG_FORMAT"},
		// no prefix: just the name
		{"", "listen", "LISTEN"},
		// dots and other punctuation become underscores, digits stay
		{"X", "tls.cert-v2", "X_TLS_CERT_V2"},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, EnvName(c.prefix, c.flag), "%s %s", c.prefix, c.flag)
	}
}

func TestLoadPrecedence(t *testing.T) {
	const file = `
queue-limit: 300
queue-timeout: 3s
listen: ":3000"
verbose: true
ratio: 0.25
join: [a:1, b:2]
rates: [1, 2, 3]
header: ["X-A: 1,2", "X-B: 3"]
`
	cases := []struct {
		name  string
		args  []string
		env   map[string]string
		file  string
		check func(t *testing.T, s *settings)
	}{
		{
			// nothing anywhere: defaults stay, nothing is marked Changed
			name: "defaults",
			check: func(t *testing.T, s *settings) {
				assert.Equal(t, 1024, *s.limit)
				assert.Equal(t, 30*time.Second, *s.timeout)
				assert.Equal(t, []int{40}, *s.rates)
				assert.False(t, s.fs.Changed("queue-limit"))
			},
		},
		{
			// the file alone sets every kind of flag
			name: "file over default",
			file: file,
			check: func(t *testing.T, s *settings) {
				assert.Equal(t, 300, *s.limit)
				assert.Equal(t, 3*time.Second, *s.timeout)
				assert.Equal(t, ":3000", *s.listen)
				assert.True(t, *s.verbose)
				assert.InDelta(t, 0.25, *s.ratio, 0)
				assert.Equal(t, []string{"a:1", "b:2"}, *s.join)
				assert.Equal(t, []int{1, 2, 3}, *s.rates)
				// list elements keep their commas for a stringArray
				assert.Equal(t, []string{"X-A: 1,2", "X-B: 3"}, *s.headers)
				assert.True(t, s.fs.Changed("queue-limit"), "Load marks what it set")
				assert.True(t, s.fs.Changed("join"), "Load marks lists it set")
			},
		},
		{
			// env beats the file, flag by flag; the file still fills the rest
			name: "env over file",
			env:  map[string]string{"SWD_QUEUE_LIMIT": "200", "SWD_JOIN": "c:3,d:4", "SWD_VERBOSE": "false"},
			file: file,
			check: func(t *testing.T, s *settings) {
				assert.Equal(t, 200, *s.limit)
				assert.Equal(t, []string{"c:3", "d:4"}, *s.join)
				assert.False(t, *s.verbose)
				assert.Equal(t, 3*time.Second, *s.timeout)
			},
		},
		{
			// flags beat env and file
			name: "flag over env over file",
			args: []string{"--queue-limit=100", "--join", "e:5", "-v=false"},
			env:  map[string]string{"SWD_QUEUE_LIMIT": "200", "SWD_JOIN": "c:3", "SWD_QUEUE_TIMEOUT": "2s"},
			file: file,
			check: func(t *testing.T, s *settings) {
				assert.Equal(t, 100, *s.limit)
				assert.Equal(t, []string{"e:5"}, *s.join)
				assert.False(t, *s.verbose)
				assert.Equal(t, 2*time.Second, *s.timeout)
			},
		},
		{
			// an empty environment variable counts as unset
			name: "empty env ignored",
			env:  map[string]string{"SWD_QUEUE_LIMIT": ""},
			file: file,
			check: func(t *testing.T, s *settings) {
				assert.Equal(t, 300, *s.limit)
			},
		},
		{
			// env with other prefixes or without prefix is not read
			name: "other prefix ignored",
			env:  map[string]string{"QUEUE_LIMIT": "7", "SWDX_QUEUE_LIMIT": "8"},
			check: func(t *testing.T, s *settings) {
				assert.Equal(t, 1024, *s.limit)
			},
		},
		{
			// durations in their usual forms, from env and file
			name: "durations",
			env:  map[string]string{"SWD_QUEUE_TIMEOUT": "1m30s"},
			check: func(t *testing.T, s *settings) {
				assert.Equal(t, 90*time.Second, *s.timeout)
			},
		},
		{
			// bools accept strconv.ParseBool forms
			name: "bool from env as 1",
			env:  map[string]string{"SWD_VERBOSE": "1"},
			check: func(t *testing.T, s *settings) {
				assert.True(t, *s.verbose)
			},
		},
		{
			// a scalar for a slice flag is split like one command-line use
			name: "slice from scalar",
			file: "rates: 5,6\njoin: x:1",
			check: func(t *testing.T, s *settings) {
				assert.Equal(t, []int{5, 6}, *s.rates)
				assert.Equal(t, []string{"x:1"}, *s.join)
			},
		},
		{
			// a list for a non-slice flag is joined with commas
			name: "list for scalar flag",
			file: "node-name: [a, b]",
			check: func(t *testing.T, s *settings) {
				assert.Equal(t, "a,b", *s.nodeName)
			},
		},
		{
			// an empty list empties a slice flag with a default
			name: "empty list",
			file: "rates: []",
			check: func(t *testing.T, s *settings) {
				assert.Empty(t, *s.rates)
			},
		},
		{
			// null values, comments only, and an empty document set nothing
			name: "null value",
			file: "# just a comment\nqueue-limit: ~\nlisten:\n",
			check: func(t *testing.T, s *settings) {
				assert.Equal(t, 1024, *s.limit)
				assert.Equal(t, ":8080", *s.listen)
			},
		},
		{
			// anchors and aliases resolve
			name: "alias",
			file: "listen: &l \":1\"\nnode-name: *l\n",
			check: func(t *testing.T, s *settings) {
				assert.Equal(t, ":1", *s.nodeName)
			},
		},
		{
			// quoted empty string is a value, unlike null
			name: "empty string value",
			file: `listen: ""`,
			check: func(t *testing.T, s *settings) {
				assert.Empty(t, *s.listen)
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSettings()
			require.NoError(t, s.fs.Parse(c.args))
			path := ""
			if c.file != "" {
				path = writeFile(t, c.file)
			}
			require.NoError(t, Load(s.fs, "SWD", path, envMap(c.env)))
			c.check(t, s)
		})
	}
}

func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name     string
		env      map[string]string
		file     string // "" means no file
		noFile   bool   // pass a path that does not exist
		is       error
		contains []string
	}{
		{
			// an int flag with a non-number from env: names flag, env var and value
			name:     "bad int from env",
			env:      map[string]string{"SWD_QUEUE_LIMIT": "lots"},
			is:       ErrInvalidValue,
			contains: []string{"--queue-limit", "SWD_QUEUE_LIMIT", `"lots"`},
		},
		{
			// a duration without unit from the file: names flag, file:key and value
			name:     "bad duration from file",
			file:     "queue-timeout: 30",
			is:       ErrInvalidValue,
			contains: []string{"--queue-timeout", "swd.yaml:queue-timeout", `"30"`, "line 1"},
		},
		{
			// YAML 1.1 "yes" is not a bool for pflag
			name:     "bad bool from file",
			file:     "verbose: yes",
			is:       ErrInvalidValue,
			contains: []string{"--verbose", `"yes"`},
		},
		{
			// a bad element in a list for an int slice
			name:     "bad list element",
			file:     "rates: [1, x]",
			is:       ErrInvalidValue,
			contains: []string{"--rates", "[1, x]"},
		},
		{
			// every bad value is reported, not only the first
			name:     "all bad values reported",
			env:      map[string]string{"SWD_QUEUE_LIMIT": "x", "SWD_RATIO": "y"},
			is:       ErrInvalidValue,
			contains: []string{"SWD_QUEUE_LIMIT", "SWD_RATIO"},
		},
		{
			// an unknown key names the key and the file
			name:     "unknown key",
			file:     "queue-limit: 1\nqueue-limt: 2\n",
			is:       ErrUnknownKey,
			contains: []string{`"queue-limt"`, "swd.yaml", "line 2"},
		},
		{
			// keys are flag names with dashes, not env-style names
			name:     "underscore key",
			file:     "queue_limit: 1",
			is:       ErrUnknownKey,
			contains: []string{`"queue_limit"`},
		},
		{
			// --config cannot name another file from inside a file
			name:     "config key",
			file:     "config: other.yaml",
			is:       ErrBadFile,
			contains: []string{"command line"},
		},
		{
			// a nested mapping is not a flag value
			name:     "nested mapping",
			file:     "listen:\n  host: x\n",
			is:       ErrBadFile,
			contains: []string{`"listen"`, "scalar"},
		},
		{
			// a list of lists is not a flag value
			name:     "nested list",
			file:     "join: [[a]]",
			is:       ErrBadFile,
			contains: []string{"list elements"},
		},
		{
			// the top level must be a mapping
			name:     "top-level list",
			file:     "- a\n- b\n",
			is:       ErrBadFile,
			contains: []string{"mapping"},
		},
		{
			// the same flag twice is ambiguous
			name:     "duplicate key",
			file:     "listen: a\nlisten: b\n",
			is:       ErrBadFile,
			contains: []string{"repeats"},
		},
		{
			// two documents are ambiguous
			name:     "two documents",
			file:     "listen: a\n---\nlisten: b\n",
			is:       ErrBadFile,
			contains: []string{"more than one"},
		},
		{
			// broken YAML syntax
			name:     "syntax error",
			file:     "listen: [a\n",
			is:       ErrBadFile,
			contains: []string{"swd.yaml"},
		},
		{
			// a named file that does not exist is an error, not "no file"
			name:     "missing file",
			noFile:   true,
			is:       fs.ErrNotExist,
			contains: []string{"does-not-exist.yaml"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSettings()
			require.NoError(t, s.fs.Parse(nil))
			path := ""
			switch {
			case c.noFile:
				path = filepath.Join(t.TempDir(), "does-not-exist.yaml")
			case c.file != "":
				path = writeFile(t, c.file)
			}
			err := Load(s.fs, "SWD", path, envMap(c.env))
			require.Error(t, err)
			assert.ErrorIs(t, err, c.is)
			for _, want := range c.contains {
				assert.Contains(t, err.Error(), want)
			}
			assert.Equal(t, strings.ToLower(err.Error()[:1]), err.Error()[:1], "errors start lower-case")
		})
	}
}

// A bad value that loses to a higher source is never parsed, so it is no error.
func TestLoadBadValueShadowed(t *testing.T) {
	s := newSettings()
	require.NoError(t, s.fs.Parse([]string{"--queue-limit=5"}))
	require.NoError(t, Load(s.fs, "SWD", writeFile(t, "queue-limit: x"), envMap(map[string]string{"SWD_QUEUE_LIMIT": "y"})))
	assert.Equal(t, 5, *s.limit)
}

func TestLoadFlags(t *testing.T) {
	cases := []struct {
		name string
		args func(path string) []string
		env  func(path string) map[string]string
		want int
	}{
		{
			// the file comes from --config
			name: "from flag",
			args: func(p string) []string { return []string{"--config", p} },
			want: 77,
		},
		{
			// the file comes from SWD_CONFIG when --config is not given
			name: "from env",
			env:  func(p string) map[string]string { return map[string]string{"SWD_CONFIG": p} },
			want: 77,
		},
		{
			// --config wins over SWD_CONFIG
			name: "flag over env",
			args: func(p string) []string { return []string{"--config", p} },
			env:  func(string) map[string]string { return map[string]string{"SWD_CONFIG": "/nonexistent.yaml"} },
			want: 77,
		},
		{
			// neither: no file, defaults
			name: "none",
			want: 1024,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, "queue-limit: 77")
			var args []string
			if c.args != nil {
				args = c.args(path)
			}
			env := map[string]string{}
			if c.env != nil {
				env = c.env(path)
			}
			s := newSettings()
			require.NoError(t, s.fs.Parse(args))
			require.NoError(t, LoadFlags(s.fs, "SWD", envMap(env)))
			assert.Equal(t, c.want, *s.limit)
		})
	}
}

// LoadFlags on a flag set without --config reads only the environment.
func TestLoadFlagsWithoutConfigFlag(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	n := fs.Int("n", 1, "")
	require.NoError(t, fs.Parse(nil))
	require.NoError(t, LoadFlags(fs, "P", envMap(map[string]string{"P_N": "2", "P_CONFIG": "/nonexistent"})))
	assert.Equal(t, 2, *n)
}

// The help flag cobra adds is never set from the environment.
func TestLoadSkipsHelp(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	h := fs.Bool(HelpFlag, false, "")
	require.NoError(t, fs.Parse(nil))
	require.NoError(t, Load(fs, "P", "", envMap(map[string]string{"P_HELP": "true"})))
	assert.False(t, *h)
}

// A file larger than the bound is refused without reading it all.
func TestLoadFileTooLarge(t *testing.T) {
	s := newSettings()
	require.NoError(t, s.fs.Parse(nil))
	big := "# " + strings.Repeat("x", maxFileSize) + "\n"
	err := Load(s.fs, "SWD", writeFile(t, big), envMap(nil))
	require.ErrorIs(t, err, ErrBadFile)
}

// nil lookupEnv means the process environment.
func TestLoadNilLookupUsesProcessEnv(t *testing.T) {
	t.Setenv("SWDTEST_QUEUE_LIMIT", "9")
	s := newSettings()
	require.NoError(t, s.fs.Parse(nil))
	require.NoError(t, Load(s.fs, "SWDTEST", "", nil))
	assert.Equal(t, 9, *s.limit)
}

func TestErrorsAreDistinct(t *testing.T) {
	assert.False(t, errors.Is(ErrUnknownKey, ErrBadFile))
	assert.False(t, errors.Is(ErrInvalidValue, ErrBadFile))
}
