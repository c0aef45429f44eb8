// Package config gives every SWD binary (swd, swdctl, dummyapp, loadgen) one
// way to be configured, with this precedence:
//
//	command-line flag  >  environment variable  >  --config FILE (YAML)  >  flag default
//
// Every flag --foo-bar of a pflag.FlagSet (cobra commands use pflag) also
// reads the environment variable PREFIX_FOO_BAR (see EnvName), and the YAML
// file may set it under the key foo-bar. The flag set stays the single
// description of a binary's settings: there is no second schema to keep in
// sync, and help output, defaults and validation all come from the flags.
//
// Typical use, after the flags were parsed (in cobra, in RunE or PreRunE):
//
//	if err := config.LoadFlags(cmd.Flags(), "SWD", os.LookupEnv); err != nil {
//		return err
//	}
//
// # YAML files
//
// The file is one YAML mapping whose keys are flag names (dashes, without the
// leading --) and whose values are scalars or lists of scalars:
//
//	queue-limit: 2048
//	queue-timeout: 5s
//	join: [10.0.0.1:7946, 10.0.0.2:7946]
//
// A scalar is given to the flag exactly as if it followed --key= on the
// command line. A list is given to a slice flag (pflag.SliceValue) element by
// element, replacing its default; for any other flag the elements are joined
// with commas. A null value (key: or key: ~) leaves the flag alone. An empty
// file sets nothing. Unknown keys, duplicate keys, nested mappings, several
// documents, merge keys (<<) and the keys "config" and "help" (command-line
// only) are errors.
//
// # Environment
//
// An environment variable that is unset or set to the empty string leaves
// the flag alone. Its value is given to the flag like one command-line
// occurrence: for a string slice "a,b" means two elements.
//
// # Errors
//
// A value that does not parse yields an error wrapping ErrInvalidValue that
// names the flag, the source (the environment variable, or file:key with its
// line) and the value; an unknown key yields ErrUnknownKey naming the key and
// the file. Load reports every bad value at once (errors.Join), not only the
// first.
//
// # Concurrency
//
// Load and LoadFlags mutate the flag set's values: call them once, from one
// goroutine, after fs.Parse and before anything reads the flags, exactly like
// fs.Parse itself. They start no goroutines and keep no state, so different
// flag sets may be loaded concurrently. lookupEnv is only called from the
// calling goroutine. EnvName is pure and safe for concurrent use.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// ConfigFlag is the name of the flag that names the YAML file (--config FILE).
// It and HelpFlag are never read from a file; LoadFlags reads ConfigFlag from
// the command line or, failing that, from the environment.
const ConfigFlag = "config"

// HelpFlag is the help flag cobra adds to every command; it is command-line only.
const HelpFlag = "help"

// Sentinel errors; test with errors.Is.
var (
	// ErrUnknownKey: the config file has a key that names no flag.
	ErrUnknownKey = errors.New("unknown key")
	// ErrInvalidValue: a value from the environment or the file does not
	// parse for its flag.
	ErrInvalidValue = errors.New("invalid value")
	// ErrBadFile: the config file cannot be read or is not a YAML mapping of
	// flag names to scalars or lists of scalars.
	ErrBadFile = errors.New("bad config file")
)

// maxFileSize bounds the config file: settings files are small, and a bound
// keeps a mistaken --config /dev/zero from eating memory.
const maxFileSize = 4 << 20

// AddConfigFlag registers the standard --config FILE flag on fs.
func AddConfigFlag(fs *pflag.FlagSet) {
	fs.String(ConfigFlag, "", "YAML file of flag-name: value settings (flags win over environment, environment over file)")
}

// EnvName returns the environment variable read for flag name:
// EnvName("SWD", "queue-limit") is "SWD_QUEUE_LIMIT". The prefix may end in
// "_" or not; an empty prefix gives just the upper-cased name. Every byte
// that is not an ASCII letter or digit becomes "_".
func EnvName(envPrefix, flagName string) string {
	var b strings.Builder
	if p := strings.TrimRight(envPrefix, "_"); p != "" {
		b.WriteString(p)
		b.WriteByte('_')
	}
	for i := 0; i < len(flagName); i++ {
		c := flagName[i]
		switch {
		case c >= 'a' && c <= 'z':
			b.WriteByte(c - 'a' + 'A')
		case c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
			b.WriteByte(c)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// LoadFlags is Load with the file taken from the --config flag of fs if it
// was set on the command line, else from the environment variable for it
// (PREFIX_CONFIG), else no file. fs need not have a --config flag.
func LoadFlags(fs *pflag.FlagSet, envPrefix string, lookupEnv func(string) (string, bool)) error {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	file := ""
	if f := fs.Lookup(ConfigFlag); f != nil {
		if f.Changed {
			file = f.Value.String()
		} else if v, ok := lookupEnv(EnvName(envPrefix, ConfigFlag)); ok && v != "" {
			file = v
			if err := fs.Set(ConfigFlag, v); err != nil {
				return fmt.Errorf("set --%s from %s: %w", ConfigFlag, EnvName(envPrefix, ConfigFlag), err)
			}
		}
	}
	return Load(fs, envPrefix, file, lookupEnv)
}

// Load applies environment and YAML values to every flag of fs that was not
// set on the command line. Call it after fs.Parse. configFile may be "" (then
// no file is read); a named file that does not exist is an error (wrapping
// fs.ErrNotExist). lookupEnv is usually os.LookupEnv (nil means that); tests
// pass a map. Flags set by Load report Changed afterwards. The --config and
// --help flags are never set by Load.
func Load(fs *pflag.FlagSet, envPrefix, configFile string, lookupEnv func(string) (string, bool)) error {
	var data []byte
	if configFile != "" {
		var err error
		data, err = readFile(configFile)
		if err != nil {
			return err
		}
	}
	return load(fs, envPrefix, configFile, data, lookupEnv)
}

func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("open config file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read config file %s: %w", name, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%w %s: larger than %d bytes", ErrBadFile, name, maxFileSize)
	}
	return data, nil
}

// fileValue is one setting of the config file.
type fileValue struct {
	key    string   // the key as written
	line   int      // 1-based line of the key
	scalar string   // the value, if !isList
	list   []string // the elements, if isList
	isList bool
}

// load is Load on file contents already read (data may be empty); file is
// only used in messages. Split out so the fuzz target needs no disk.
func load(fs *pflag.FlagSet, envPrefix, file string, data []byte, lookupEnv func(string) (string, bool)) error {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	values, err := parseFile(fs, file, data)
	if err != nil {
		return err
	}

	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == ConfigFlag || f.Name == HelpFlag {
			return
		}
		if env := EnvName(envPrefix, f.Name); env != "" {
			if v, ok := lookupEnv(env); ok && v != "" {
				if err := fs.Set(f.Name, v); err != nil {
					errs = append(errs, invalid(f, env, v, err))
				}
				return
			}
		}
		fv, ok := values[f.Name]
		if !ok {
			return
		}
		source := fmt.Sprintf("%s:%s (line %d)", file, fv.key, fv.line)
		if err := apply(fs, f, fv); err != nil {
			shown := fv.scalar
			if fv.isList {
				shown = "[" + strings.Join(fv.list, ", ") + "]"
			}
			errs = append(errs, invalid(f, source, shown, err))
		}
	})
	return errors.Join(errs...)
}

// apply sets flag f from a file value.
func apply(fs *pflag.FlagSet, f *pflag.Flag, fv fileValue) error {
	if !fv.isList {
		return fs.Set(f.Name, fv.scalar)
	}
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		if err := sv.Replace(fv.list); err != nil {
			return err
		}
		f.Changed = true
		return nil
	}
	return fs.Set(f.Name, strings.Join(fv.list, ","))
}

// invalid builds the error for a value that does not parse.
func invalid(f *pflag.Flag, source, value string, err error) error {
	// fs.Set wraps the cause in a message that repeats flag and value.
	var ive *pflag.InvalidValueError
	if errors.As(err, &ive) && ive.Unwrap() != nil {
		err = ive.Unwrap()
	}
	return fmt.Errorf("%w %q for flag --%s from %s: %w", ErrInvalidValue, value, f.Name, source, err)
}

// parseFile decodes the YAML file into values keyed by flag name, checking
// its shape and that every key names a flag of fs.
func parseFile(fs *pflag.FlagSet, file string, data []byte) (map[string]fileValue, error) {
	values := map[string]fileValue{}
	if len(bytes.TrimSpace(data)) == 0 {
		return values, nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) { // only comments or "---"
			return values, nil
		}
		return nil, fmt.Errorf("%w %s: %w", ErrBadFile, file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, fmt.Errorf("%w %s: %w", ErrBadFile, file, err)
		}
		return nil, fmt.Errorf("%w %s: more than one YAML document", ErrBadFile, file)
	}

	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return values, nil
		}
		root = root.Content[0]
	}
	root = resolve(root)
	if root == nil {
		return nil, fmt.Errorf("%w %s: unresolvable alias", ErrBadFile, file)
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return values, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w %s: line %d: want a mapping of flag names to values", ErrBadFile, file, root.Line)
	}

	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := resolve(root.Content[i]), resolve(root.Content[i+1])
		if k == nil || v == nil {
			return nil, fmt.Errorf("%w %s: line %d: unresolvable alias", ErrBadFile, file, root.Content[i].Line)
		}
		if k.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("%w %s: line %d: keys must be flag names", ErrBadFile, file, k.Line)
		}
		key := k.Value
		if key == "<<" {
			return nil, fmt.Errorf("%w %s: line %d: merge keys are not supported", ErrBadFile, file, k.Line)
		}
		f := fs.Lookup(key)
		if f == nil {
			return nil, fmt.Errorf("%w %q in config file %s (line %d)", ErrUnknownKey, key, file, k.Line)
		}
		if f.Name == ConfigFlag || f.Name == HelpFlag {
			return nil, fmt.Errorf("%w %s: line %d: %q may only be given on the command line", ErrBadFile, file, k.Line, key)
		}
		if prev, dup := values[f.Name]; dup {
			return nil, fmt.Errorf("%w %s: line %d: %q repeats the setting of line %d", ErrBadFile, file, k.Line, key, prev.line)
		}
		fv := fileValue{key: key, line: k.Line}
		switch v.Kind {
		case yaml.ScalarNode:
			if v.Tag == "!!null" {
				continue // "key:" or "key: ~" leaves the flag alone
			}
			fv.scalar = v.Value
		case yaml.SequenceNode:
			fv.isList = true
			fv.list = make([]string, 0, len(v.Content))
			for _, e := range v.Content {
				e = resolve(e)
				if e == nil || e.Kind != yaml.ScalarNode {
					return nil, fmt.Errorf("%w %s: line %d: %q: list elements must be scalars", ErrBadFile, file, k.Line, key)
				}
				fv.list = append(fv.list, e.Value)
			}
		default:
			return nil, fmt.Errorf("%w %s: line %d: %q: value must be a scalar or a list of scalars", ErrBadFile, file, k.Line, key)
		}
		values[f.Name] = fv
	}
	return values, nil
}

// resolve follows alias nodes to what they name (nil if it cannot).
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i == 8 {
			return nil
		}
		n = n.Alias
	}
	return n
}
