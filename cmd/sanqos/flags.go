package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// newFlagSet returns a flag set whose --help prints the synopsis, a
// description and the flags, and whose errors are reported once.
func newFlagSet(name, synopsis, description string, stderr io.Writer) *flag.FlagSet {
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

// errHelp is returned by parseFlags when --help was asked for; the command
// returns it and dispatch exits 0.
var errHelp = errors.New("help shown")

// parseFlags parses args and rejects stray positional arguments. A bad
// flag gets one line saying what is wrong and where the help is; the full
// text is printed only for --help.
func parseFlags(fs *flag.FlagSet, args []string) error {
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
			return errHelp
		}
		hint()
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		hint()
		return errUsage
	}
	return nil
}

// usageError reports a flag value that parsed but makes no sense, in one
// line, and points at --help.
func usageError(fs *flag.FlagSet, format string, a ...any) error {
	fmt.Fprintf(fs.Output(), "%s: %s\n", fs.Name(), fmt.Sprintf(format, a...))
	fmt.Fprintf(fs.Output(), "Run '%s --help' for usage.\n", fs.Name())
	return errUsage
}
