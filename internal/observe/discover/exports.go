package discover

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Export lists of known file servers: what a server serves, when its open
// files do not say (a kernel server has no process; a user-space one opens
// files only while clients use them).

// readExports reads the export paths of one file: nfs-ganesha's
// configuration (EXPORT blocks with Path = ...) or an /etc/exports-style
// list (the path first on each line), told apart by the file's name:
// "exports" or "*.exports" are the latter.
func readExports(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading export list: %w", err)
	}
	base := filepath.Base(path)
	var out []string
	if base == "exports" || strings.HasSuffix(base, ".exports") {
		out = parseEtcExports(string(b))
	} else {
		out = parseGaneshaExports(string(b))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("export list %s names no export path (want EXPORT { Path = /dir; } blocks, or /etc/exports lines)", path)
	}
	return out, nil
}

var (
	ganeshaComment = regexp.MustCompile(`#[^\n]*`)
	// An EXPORT block up to its first closing brace that ends a line
	// of its own nesting is hard to find with a regexp; the blocks
	// nested in it (FSAL, CLIENT) hold no Path key, so every Path =
	// line inside an EXPORT keyword's reach is the export's.
	ganeshaExport = regexp.MustCompile(`(?i)\bEXPORT\s*\{`)
	ganeshaPath   = regexp.MustCompile(`(?i)(?:^|[\s{;])Path\s*=\s*"?([^";\s]+)"?\s*;`)
)

// parseGaneshaExports returns the Path of every EXPORT block, in order.
// EXPORT_DEFAULTS and other blocks have no Path; %include is not
// followed (name the included file instead).
func parseGaneshaExports(text string) []string {
	text = ganeshaComment.ReplaceAllString(text, "")
	var out []string
	locs := ganeshaExport.FindAllStringIndex(text, -1)
	for i, l := range locs {
		end := len(text)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		block := blockBody(text[l[1]:end])
		if m := ganeshaPath.FindStringSubmatch(block); m != nil && !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// blockBody cuts s (the text after an opening brace) at its matching
// closing brace.
func blockBody(s string) string {
	depth := 1
	for i, r := range s {
		switch r {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return s[:i]
			}
		}
	}
	return s
}

// parseEtcExports returns the first field of every export line of
// exports(5): a path, possibly quoted, lines continued with a backslash.
func parseEtcExports(text string) []string {
	text = strings.ReplaceAll(text, "\\\n", " ")
	var out []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		var p string
		if line[0] == '"' {
			if end := strings.IndexByte(line[1:], '"'); end >= 0 {
				p = line[1 : end+1]
			}
		} else {
			p = strings.Fields(line)[0]
		}
		if strings.HasPrefix(p, "/") && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// ganeshaConfig is the configuration file of a ganesha.nfsd command
// line: the argument of -f, else the package's default.
func ganeshaConfig(args []string) string {
	for i, a := range args {
		if a == "-f" && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "-f"); ok && v != "" {
			return v
		}
	}
	return "/etc/ganesha/ganesha.conf"
}
