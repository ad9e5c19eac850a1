package lint

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The README is for the administrator who installs sanqos: short, one
// current results table, the two commands that work on a fresh machine.
// History belongs in docs/ and in git.
const maxReadmeLines = 250

var (
	datedRow = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2}\b`)
	mdLink   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
)

func readFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(moduleRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReadmeShape: at most maxReadmeLines lines, no dated table row, and
// the two set-up commands (make demo, make test) in its code blocks.
func TestReadmeShape(t *testing.T) {
	text := readFile(t, "README.md")
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) > maxReadmeLines {
		t.Errorf("README.md has %d lines, at most %d: move detail to docs/", len(lines), maxReadmeLines)
	}
	commands := map[string]bool{}
	inBlock := false
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "make" {
				commands[f[0]+" "+f[1]] = true
			}
			continue
		}
		if strings.HasPrefix(l, "|") && datedRow.MatchString(l) {
			t.Errorf("README.md:%d: a dated table row (history goes to docs/results.md and git): %s", i+1, l)
		}
	}
	for _, c := range []string{"make demo", "make test"} {
		if !commands[c] {
			t.Errorf("README.md shows no %q command", c)
		}
	}
	if ci := readFile(t, ".ci/run"); !strings.Contains(ci, "\nmake test\n") {
		t.Errorf(".ci/run does not run make test, the README's test command")
	}
}

// TestDocLinks: every relative link of the README and of docs/*.md names
// a file that exists, and every link into a Markdown file names a heading
// that is there (the README's results table links each experiment's
// section of docs/results.md).
func TestDocLinks(t *testing.T) {
	root := moduleRoot(t)
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files := []string{"README.md"}
	for _, d := range docs {
		files = append(files, strings.TrimPrefix(d, root+string(filepath.Separator)))
	}
	for _, f := range files {
		for _, m := range mdLink.FindAllStringSubmatch(readFile(t, f), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			resolved := f
			if path != "" {
				resolved = filepath.Join(filepath.Dir(f), path)
				if _, err := os.Stat(filepath.Join(root, resolved)); err != nil {
					t.Errorf("%s links %s, which does not exist", f, target)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(resolved, ".md") {
				continue
			}
			if !headingAnchors(readFile(t, resolved))[anchor] {
				t.Errorf("%s links %s: %s has no heading with that anchor", f, target, resolved)
			}
		}
	}
}

// headingAnchors are the anchors GitHub gives the headings of a Markdown
// text: lower case, spaces to hyphens, punctuation dropped, -1, -2, …
// on repeats.
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	inBlock := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "```") {
			inBlock = !inBlock
		}
		if inBlock || !strings.HasPrefix(l, "#") {
			continue
		}
		a := slug(strings.TrimLeft(l, "#"))
		for n, base := 1, a; anchors[a]; n++ {
			a = base + "-" + strconv.Itoa(n)
		}
		anchors[a] = true
	}
	return anchors
}

func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		" fig5.11: autonomic control":                      "fig511-autonomic-control",
		" `lab run all` in full (2026-11-26 – 2026-11-28)": "lab-run-all-in-full-2026-11-26--2026-11-28",
		" fig5.1–fig5.4: the mechanism":                    "fig51fig54-the-mechanism",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}
