package main

import "github.com/sanqos/sanqos/internal/cli"

// The commands of this binary read flags the way every sanqos command does
// (internal/cli); these short names keep the command files readable.
var (
	newFlagSet = cli.NewFlagSet
	parseFlags = cli.Parse
	usageError = cli.UsageError
	errHelp    = cli.ErrHelp
	errUsage   = cli.ErrUsage
)
