package config

import (
	"errors"
	"strings"
	"testing"
)

// FuzzLoadYAML feeds arbitrary bytes as the config file to a flag set with
// every kind of flag: Load must never panic, and when it fails the error must
// be one of the package's sentinels (a bad file, an unknown key or a bad
// value), never something unclassified. Seeds are in testdata/fuzz/FuzzLoadYAML.
func FuzzLoadYAML(f *testing.F) {
	f.Add([]byte("queue-limit: 10\nqueue-timeout: 1s\njoin: [a, b]\n"))
	f.Add([]byte("listen: &a x\nnode-name: *a\n"))
	f.Add([]byte("verbose: maybe\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := newSettings()
		if err := s.fs.Parse(nil); err != nil {
			t.Fatal(err)
		}
		fs := s.fs
		fs.StringToString("labels", nil, "")
		fs.Uint8("small", 0, "")
		fs.IP("ip", nil, "")
		err := load(fs, "SWD", "fuzz.yaml", data, func(string) (string, bool) { return "", false })
		if err == nil {
			return
		}
		if !errors.Is(err, ErrBadFile) && !errors.Is(err, ErrUnknownKey) && !errors.Is(err, ErrInvalidValue) {
			t.Fatalf("unclassified error: %v", err)
		}
		if !strings.Contains(err.Error(), "fuzz.yaml") {
			t.Fatalf("error does not name the file: %v", err)
		}
	})
}
