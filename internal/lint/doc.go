// Package lint holds repo-wide tests of conventions that the compiler and
// go vet do not check, such as every package having a package comment. It
// has no code of its own; run it with `go test ./internal/lint/`.
package lint
