// Package cli holds what the sanqos commands share in how they read their
// flags and report a misuse: --help that prints a synopsis and a
// description, one line for a bad flag, and the two errors the dispatchers
// turn into exit codes.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// ErrHelp is returned by Parse when --help was asked for; the command
// returns it and its dispatcher exits 0.
var ErrHelp = errors.New("help shown")

// ErrUsage marks an error that was already explained to the user together
// with usage text; dispatchers exit 2 for it without repeating the message.
var ErrUsage = errors.New("usage error")

// NewFlagSet returns a flag set named "sanqos NAME" whose --help prints the
// synopsis, a description and the flags, and whose errors are reported once.
func NewFlagSet(name, synopsis, description string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sanqos "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s\n\n%s\n", synopsis, description)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintf(fs.Output(), "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

// Parse parses args and rejects stray positional arguments. A bad flag
// gets one line saying what is wrong and where the help is; the full text
// is printed only for --help.
func Parse(fs *flag.FlagSet, args []string) error { return ParseUpTo(fs, args, 0) }

// ParseUpTo is Parse for a command that takes up to n positional
// arguments after its flags (fs.Args).
func ParseUpTo(fs *flag.FlagSet, args []string, n int) error {
	full := fs.Usage
	hint := func() {
		fmt.Fprintf(fs.Output(), "Run '%s --help' for usage.\n", fs.Name())
	}
	// The flag package has already printed what was wrong when Parse
	// fails; it calls Usage for --help too, so Usage is silenced here and
	// the right text chosen afterwards.
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = full
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			full()
			return ErrHelp
		}
		hint()
		return ErrUsage
	}
	if fs.NArg() > n {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(n))
		hint()
		return ErrUsage
	}
	return nil
}

// UsageError reports a flag value that parsed but makes no sense, in one
// line, and points at --help.
func UsageError(fs *flag.FlagSet, format string, a ...any) error {
	fmt.Fprintf(fs.Output(), "%s: %s\n", fs.Name(), fmt.Sprintf(format, a...))
	fmt.Fprintf(fs.Output(), "Run '%s --help' for usage.\n", fs.Name())
	return ErrUsage
}
