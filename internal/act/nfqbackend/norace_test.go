//go:build !race

package nfqbackend

const raceEnabled = false
