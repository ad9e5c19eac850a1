package config

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/BurntSushi/toml"
)

// Changed lists the keys whose values differ between a and b, sorted, in
// the file's spelling (pid.kp, resources.vg-data.threshold): what a
// reload changed, for its log line.
func Changed(a, b Config) []string {
	fa, fb := flatten(a), flatten(b)
	var keys []string
	for k, v := range fa {
		if w, ok := fb[k]; !ok || w != v {
			keys = append(keys, k)
		}
	}
	for k := range fb {
		if _, ok := fa[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// flatten is c as dotted keys and their values as text, through the TOML
// encoding the file is read with.
func flatten(c Config) map[string]string {
	var buf bytes.Buffer
	out := map[string]string{}
	if err := toml.NewEncoder(&buf).Encode(c); err != nil {
		out["(config)"] = err.Error() // not expected: every type encodes
		return out
	}
	var m map[string]any
	if _, err := toml.Decode(buf.String(), &m); err != nil {
		out["(config)"] = err.Error()
		return out
	}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if sub, ok := v.(map[string]any); ok {
			for k, x := range sub {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				walk(p, x)
			}
			return
		}
		out[prefix] = fmt.Sprint(v)
	}
	walk("", m)
	return out
}
