package helpdoc

import (
	"fmt"
	"regexp"
	"strings"
)

// Meta is what a page's header and footer say beside the help.
type Meta struct {
	Version string // "sanqos VERSION" in the footer
	Date    string // YYYY-MM-DD: the build's (SOURCE_DATE_EPOCH), for reproducible pages
}

// option matches an option-like word (-v, --config, -cleanup-only) whose
// hyphens must be minus signs (\-) in roff, so that the page can be
// copied into a shell; other hyphens stay hyphens.
var option = regexp.MustCompile(`(^|[\s(\['"/=])(--?[A-Za-z][A-Za-z0-9_.-]*)`)

// esc escapes text for a roff line: backslashes, option dashes, and a
// leading . or ' that would make the line a request.
func esc(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = option.ReplaceAllStringFunc(s, func(m string) string {
		return strings.ReplaceAll(m, "-", `\-`)
	})
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

func header(b *strings.Builder, name, summary string, m Meta) {
	fmt.Fprintf(b, ".\\\" Generated from '%s --help' by internal/helpdoc; do not edit.\n", strings.ReplaceAll(name, "-", " "))
	fmt.Fprintf(b, ".TH %s 8 %q %q \"System Administration\"\n", strings.ReplaceAll(strings.ToUpper(name), "-", `\-`), m.Date, "sanqos "+m.Version)
	fmt.Fprintf(b, ".SH NAME\n%s \\- %s\n", strings.ReplaceAll(name, "-", `\-`), esc(summary))
}

func synopsis(b *strings.Builder, lines []string) {
	b.WriteString(".SH SYNOPSIS\n.nf\n")
	for _, l := range lines {
		b.WriteString(esc(l) + "\n")
	}
	b.WriteString(".fi\n")
}

// body writes paragraphs; one whose lines after the first are indented
// (an example, a table) is kept as it is laid out.
func body(b *strings.Builder, paras [][]string) {
	for _, p := range paras {
		b.WriteString(".PP\n")
		pre := false
		for _, l := range p {
			if strings.HasPrefix(l, "  ") {
				pre = true
			}
		}
		if pre {
			b.WriteString(".nf\n")
		}
		for _, l := range p {
			if !pre {
				l = strings.TrimSpace(l)
			}
			b.WriteString(esc(l) + "\n")
		}
		if pre {
			b.WriteString(".fi\n")
		}
	}
}

// Section is an extra section of a page: a title and paragraphs.
type Section struct {
	Title string
	Paras [][]string
}

// CommandPage renders sanqos-NAME(8) from the command's help, its summary
// on the top-level list and extra sections (a mode's description, files).
func CommandPage(name, summary string, h Help, extra []Section, seeAlso []string, m Meta) string {
	var b strings.Builder
	header(&b, "sanqos-"+name, summary, m)
	synopsis(&b, h.Synopsis)
	b.WriteString(".SH DESCRIPTION\n")
	body(&b, h.Description)
	if len(h.Flags) > 0 {
		b.WriteString(".SH OPTIONS\n")
		b.WriteString("Flags take one dash or two: \\fB\\-x\\fR and \\fB\\-\\-x\\fR are the same; a value follows a space or =.\n")
		for _, f := range h.Flags {
			fmt.Fprintf(&b, ".TP\n\\fB\\-\\-%s\\fR", strings.ReplaceAll(f.Name, "-", `\-`))
			if f.Arg != "" {
				fmt.Fprintf(&b, " \\fI%s\\fR", esc(f.Arg))
			}
			b.WriteString("\n" + esc(f.Usage) + "\n")
		}
	}
	for _, s := range extra {
		sectionOut(&b, s)
	}
	seeAlsoOut(&b, seeAlso)
	return b.String()
}

// TopPage renders sanqos(8): the overview and the list of commands.
func TopPage(t Top, commands []Command, extra []Section, seeAlso []string, m Meta) string {
	var b strings.Builder
	header(&b, "sanqos", strings.TrimSuffix(strings.TrimPrefix(t.Summary, "sanqos "), "."), m)
	synopsis(&b, t.Synopsis)
	b.WriteString(".SH DESCRIPTION\n")
	body(&b, t.Description)
	b.WriteString(".SH COMMANDS\n")
	for _, c := range commands {
		fmt.Fprintf(&b, ".TP\n\\fB%s\\fR\n%s\n", c.Name, esc(c.Summary))
	}
	for _, s := range extra {
		sectionOut(&b, s)
	}
	seeAlsoOut(&b, seeAlso)
	return b.String()
}

func sectionOut(b *strings.Builder, s Section) {
	fmt.Fprintf(b, ".SH %s\n", strings.ToUpper(s.Title))
	body(b, s.Paras)
}

func seeAlsoOut(b *strings.Builder, refs []string) {
	if len(refs) == 0 {
		return
	}
	b.WriteString(".SH SEE ALSO\n")
	for i, r := range refs {
		name, sect, _ := strings.Cut(strings.TrimSuffix(r, ")"), "(")
		sep := ","
		if i == len(refs)-1 {
			sep = ""
		}
		fmt.Fprintf(b, ".BR %s (%s)%s\n", strings.ReplaceAll(name, "-", `\-`), sect, sep)
	}
}
