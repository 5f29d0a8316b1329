package envoyrls

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Config is one domain's rules, as a file of envoyproxy/ratelimit's
// configuration writes them: a domain and its tree of descriptors.
//
// A request's descriptor is a list of entries (key and value). The
// server walks the tree one level per entry, and the rule that applies
// is the rate_limit of the descriptor that the last entry reaches (see
// Descriptor). A file may hold several domains as YAML documents
// separated by "---"; no two configurations may name the same domain.
type Config struct {
	// Domain names the configuration; a request names the domain it is
	// decided in. It must not be empty.
	Domain string `yaml:"domain"`

	// Descriptors are the tree's first level.
	Descriptors []Descriptor `yaml:"descriptors"`
}

// Descriptor is one node of a domain's tree: it matches a request entry
// by key and value, and may limit the requests whose descriptor ends at
// it and hold the next level of the tree.
//
// At each level an entry matches the descriptor of the same key and
// value first, then the first descriptor, in the file's order, of the
// same key whose value ends in '*' and whose value before the '*' is a
// prefix of the entry's value (a wildcard), then the descriptor of the
// same key without a value. Each request value that a descriptor without
// a value, or a wildcard without share_threshold, matches counts apart
// from the others; a descriptor with a value fixes it.
//
// A descriptor with neither rate_limit nor descriptors allows every
// request that ends at it, and so does one without rate_limit.
type Descriptor struct {
	// Key is the entry's key; it must not be empty.
	Key string `yaml:"key"`

	// Value is the entry's value: "" for any value, each counted apart;
	// a value ending in '*' for any value that starts with what comes
	// before it.
	Value string `yaml:"value"`

	// RateLimit limits the requests whose descriptor ends here; nil for
	// none.
	RateLimit *RateLimit `yaml:"rate_limit"`

	// Descriptors are the tree's next level.
	Descriptors []Descriptor `yaml:"descriptors"`

	// ShadowMode counts and decides the limit but never refuses a
	// request by it.
	ShadowMode bool `yaml:"shadow_mode"`

	// ShareThreshold makes every value that a wildcard matches share one
	// count, instead of one count for each value. It needs a Value that
	// ends in '*'.
	ShareThreshold bool `yaml:"share_threshold"`

	// DetailedMetric is accepted for compatibility; the reference uses
	// it to name statistics only, and this server ignores it.
	DetailedMetric bool `yaml:"detailed_metric"`

	// ValueToMetric is accepted for compatibility; the reference uses it
	// to name statistics only, and this server ignores it.
	ValueToMetric bool `yaml:"value_to_metric"`

	// The fields below are this server's own, beside rate_limit; the
	// reference refuses them as unknown keys. Each needs a rate_limit
	// that is not unlimited.

	// Algorithm counts the limits: "" or "fixed_window" (the default)
	// counts in fixed windows, "sliding_window" in sliding windows,
	// "token_bucket" refills a bucket of Burst at requests_per_unit per
	// unit. With sliding_window or token_bucket, rate_limit's unit must
	// be SECOND, MINUTE, HOUR or DAY (a window of 24 hours).
	Algorithm string `yaml:"algorithm"`

	// Burst is, for token_bucket only, the most requests at once: the
	// bucket's size. 0 means requests_per_unit.
	Burst uint64 `yaml:"burst"`

	// Limits are further limits that a request must fit as well as
	// rate_limit's, decided all or nothing: a request that one refuses
	// counts against none. At most 4, their units distinct from each
	// other and from rate_limit's.
	Limits []Limit `yaml:"limits"`

	// Leases decides a hot descriptor from blocks of its budget that the
	// server takes from the store at once, instead of asking the store
	// for each request.
	Leases bool `yaml:"leases"`
}

// RateLimit is a descriptor's limit: RequestsPerUnit requests per Unit,
// or Unlimited.
//
// Unit is one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR, in any
// case. With a fixed window (the default algorithm) DAY, WEEK, MONTH and
// YEAR are periods of the UTC calendar: a day starts at 00:00 UTC, a
// week on Monday (as ISO 8601 has it), a month on its first day and a
// year on January 1. With sliding_window and token_bucket the unit must
// be SECOND, MINUTE, HOUR or DAY, DAY being a window of 24 hours.
type RateLimit struct {
	// Unit is the period that RequestsPerUnit counts in. It is required
	// unless Unlimited, and must then be empty.
	Unit string `yaml:"unit"`

	// RequestsPerUnit is how many requests a period allows; 0 refuses
	// every request that costs anything.
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`

	// Unlimited allows every request, counting nothing; the response
	// reports the most remaining that it can.
	Unlimited bool `yaml:"unlimited"`

	// Name names the limit for Replaces and the response's current
	// limit; "" for none.
	Name string `yaml:"name"`

	// Replaces are the names of limits that this one replaces: when a
	// request's descriptors match both, the replaced limit is neither
	// counted nor decided. A limit may not replace its own name.
	Replaces []Replace `yaml:"replaces"`
}

// Replace names a limit (RateLimit.Name) that a RateLimit replaces. The
// name must not be empty.
type Replace struct {
	Name string `yaml:"name"`
}

// Limit is one of a descriptor's further limits: RequestsPerUnit
// requests per Unit. Unit is required and is one of SECOND, MINUTE,
// HOUR, DAY, WEEK, MONTH or YEAR, in any case, whatever the algorithm:
// WEEK, MONTH and YEAR are periods of the UTC calendar here, as they are
// for a fixed window (see RateLimit), while SECOND, MINUTE, HOUR and DAY
// are as rate_limit's unit would be with the descriptor's algorithm.
type Limit struct {
	Unit            string `yaml:"unit"`
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
}

// unknownField matches yaml's error for a key that no field takes.
var unknownField = regexp.MustCompile(`^line (\d+): field (.+) not found in type \S+$`)

// ParseConfig reads data, one or more YAML documents separated by
// "---", each one domain's Config. name names the data in errors, as the
// file's name does. A key that is not a field of Config, Descriptor,
// RateLimit, Replace or Limit is an error that names the key and its
// line: quota_mode, for one, is the reference's and this server does not
// support it. So is a value of the wrong type, such as a negative or
// fractional requests_per_unit (or one in exponent form, as 1e3), and a
// key given twice in one mapping.
// Data that holds no document is an error, as the reference refuses an
// empty file. ParseConfig checks the syntax only: compile checks what
// the configurations say.
func ParseConfig(name string, data []byte) ([]Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	// nodes reads the same documents as trees, for what the typed
	// decoding lets through: yaml truncates a fraction into an integer.
	nodes := yaml.NewDecoder(bytes.NewReader(data))
	var cfgs []Config
	for {
		var c Config
		err := dec.Decode(&c)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, parseError(name, len(cfgs), err)
		}
		var n yaml.Node
		if err := nodes.Decode(&n); err != nil {
			return nil, parseError(name, len(cfgs), err)
		}
		if err := checkWhole(&n); err != nil {
			return nil, fmt.Errorf("envoyrls: %s: document %d: %w", name, len(cfgs)+1, err)
		}
		cfgs = append(cfgs, c)
	}
	if len(cfgs) == 0 {
		return nil, fmt.Errorf("envoyrls: %s: no configuration: the file holds no YAML document", name)
	}
	return cfgs, nil
}

// parseError describes err, yaml's error for the document after the
// first n of file name, naming an unknown key for what it is.
func parseError(name string, n int, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("envoyrls: %s: document %d: %w", name, n+1, err)
	}
	msgs := make([]string, len(te.Errors))
	for i, e := range te.Errors {
		if m := unknownField.FindStringSubmatch(e); m != nil {
			e = fmt.Sprintf("line %s: unknown key %q: this server does not support it", m[1], m[2])
		}
		msgs[i] = e
	}
	return fmt.Errorf("envoyrls: %s: document %d: %s", name, n+1, strings.Join(msgs, "; "))
}

// wholeKeys are the keys whose values are whole numbers.
var wholeKeys = map[string]bool{"requests_per_unit": true, "burst": true}

// checkWhole refuses a fraction, or a number in exponent form, as the
// value of a key of wholeKeys anywhere in n.
func checkWhole(n *yaml.Node) error {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if wholeKeys[k.Value] && v.Kind == yaml.ScalarNode && v.ShortTag() == "!!float" {
				return fmt.Errorf("line %d: %s: %s is not a whole number", v.Line, k.Value, v.Value)
			}
		}
	}
	for _, c := range n.Content {
		if err := checkWhole(c); err != nil {
			return err
		}
	}
	return nil
}

// LoadConfig reads the configurations at path: a file, or a directory
// whose files ending in .yaml or .yml are each read, in the order of
// their names. A directory's subdirectories are not read, nor are its
// files whose name starts with '.'; a symbolic link is followed, so
// that a Kubernetes ConfigMap's mount reads as its files. Each file is
// read by ParseConfig, with its path as its name. A directory without
// such files holds no configuration, which is not an error.
func LoadConfig(path string) ([]Config, error) {
	files, err := configFiles(path)
	if err != nil {
		return nil, err
	}
	var cfgs []Config
	for _, f := range files {
		c, err := loadFile(f)
		if err != nil {
			return nil, err
		}
		cfgs = append(cfgs, c...)
	}
	return cfgs, nil
}

// configFiles lists the files that LoadConfig reads at path, in order.
func configFiles(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("envoyrls: %w", err)
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path) // sorted by name
	if err != nil {
		return nil, fmt.Errorf("envoyrls: %w", err)
	}
	var files []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
			continue
		}
		file := filepath.Join(path, n)
		fi, err := os.Stat(file)
		if err != nil {
			return nil, fmt.Errorf("envoyrls: %w", err)
		}
		if fi.Mode().IsRegular() {
			files = append(files, file)
		}
	}
	return files, nil
}

// loadFile reads the file at path by ParseConfig.
func loadFile(path string) ([]Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("envoyrls: %w", err)
	}
	return ParseConfig(path, data)
}
