// Package helpdoc turns the --help output of the sanqos commands into
// their manual pages (roff) and a bash completion script, so that both
// are built from what the binary prints and never drift from it. It
// parses the two shapes internal/cli and cmd/sanqos print: the top-level
// usage (a summary, paragraphs, Usage: and Commands: sections) and a
// command's (Usage:, paragraphs, Flags: as flag.PrintDefaults writes).
package helpdoc

import (
	"errors"
	"fmt"
	"strings"
)

// Top is the parsed top-level help: 'sanqos --help'.
type Top struct {
	Summary     string     // the first sentence
	Description [][]string // paragraphs, each its lines
	Synopsis    []string
	Commands    []Command
}

// Command is one line of the top-level Commands: section.
type Command struct{ Name, Summary string }

// Help is the parsed help of one command: 'sanqos NAME --help'.
type Help struct {
	Synopsis    []string
	Description [][]string
	Flags       []Flag
}

// Flag is one flag as flag.PrintDefaults prints it. Arg is the value's
// placeholder ("" for a boolean flag, which takes none).
type Flag struct{ Name, Arg, Usage string }

// paragraphs splits lines into blank-line separated paragraphs.
func paragraphs(lines []string) [][]string {
	var out [][]string
	var cur []string
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			if cur != nil {
				out = append(out, cur)
				cur = nil
			}
			continue
		}
		cur = append(cur, strings.TrimRight(l, " \t"))
	}
	if cur != nil {
		out = append(out, cur)
	}
	return out
}

// ParseTop parses the top-level help.
func ParseTop(text string) (Top, error) {
	var t Top
	paras := paragraphs(strings.Split(text, "\n"))
	if len(paras) == 0 {
		return t, errors.New("empty help")
	}
	t.Summary = strings.Join(paras[0], " ")
	for i := 1; i < len(paras); i++ {
		p := paras[i]
		switch strings.TrimSpace(p[0]) {
		case "Usage:":
			for _, l := range p[1:] {
				t.Synopsis = append(t.Synopsis, strings.TrimSpace(l))
			}
		case "Commands:":
			for _, l := range p[1:] {
				name, summary, ok := strings.Cut(strings.TrimSpace(l), " ")
				if !ok {
					return t, fmt.Errorf("command line %q has no summary", l)
				}
				t.Commands = append(t.Commands, Command{name, strings.TrimSpace(summary)})
			}
		default:
			if len(t.Commands) > 0 {
				continue // the closing "Run 'sanqos <command> --help'" hint
			}
			t.Description = append(t.Description, p)
		}
	}
	if len(t.Synopsis) == 0 || len(t.Commands) == 0 {
		return t, errors.New("no Usage: or no Commands: section")
	}
	return t, nil
}

// Parse parses one command's help.
func Parse(text string) (Help, error) {
	var h Help
	lines := strings.Split(text, "\n")
	first, ok := strings.CutPrefix(lines[0], "Usage: ")
	if !ok {
		return h, fmt.Errorf("help does not start with Usage: %q", lines[0])
	}
	h.Synopsis = []string{strings.TrimSpace(first)}
	i := 1
	for ; i < len(lines) && strings.HasPrefix(lines[i], " "); i++ {
		h.Synopsis = append(h.Synopsis, strings.TrimSpace(lines[i]))
	}
	rest := lines[i:]
	flagsAt := len(rest)
	for j, l := range rest {
		if l == "Flags:" {
			flagsAt = j
			break
		}
	}
	h.Description = paragraphs(rest[:flagsAt])
	if flagsAt == len(rest) {
		return h, nil
	}
	for _, l := range rest[flagsAt+1:] {
		switch {
		case strings.HasPrefix(l, "  -"):
			name, arg, _ := strings.Cut(strings.TrimPrefix(l, "  -"), " ")
			h.Flags = append(h.Flags, Flag{Name: name, Arg: strings.TrimSpace(arg)})
		case strings.HasPrefix(l, "    \t"):
			if len(h.Flags) == 0 {
				return h, fmt.Errorf("flag usage before any flag: %q", l)
			}
			f := &h.Flags[len(h.Flags)-1]
			f.Usage = strings.TrimSpace(f.Usage + " " + strings.TrimSpace(l))
		case strings.TrimSpace(l) == "":
		default:
			return h, fmt.Errorf("unexpected line among the flags: %q", l)
		}
	}
	return h, nil
}
