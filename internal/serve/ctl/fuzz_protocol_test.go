package ctl

import (
	"bufio"
	"bytes"
	"context"
	"strings"
	"testing"
)

// FuzzRequestLines: the control socket's framing and decoding, with the
// manual handler's validation behind it. Any bytes must give one answer
// per line, each either OK or with an error message, never a panic.
func FuzzRequestLines(f *testing.F) {
	f.Add([]byte(`{"op":"throttle","ip":"10.0.0.3","delay":"4.6ms","direction":"both","ports":[3260,3261]}` + "\n"))
	f.Add([]byte(`{"op":"free","ip":"10.0.0.3"}` + "\n" + `{"op":"list"}`))
	f.Add([]byte(`{"op":"list","delya":"1ms"}` + "\n\n" + `{"op":"status"} {}` + "\n"))
	f.Add([]byte(`{"op":"throttle","ip":"::ffff:10.0.0.3","delay":"1e9h","ports":[0]}`))
	f.Add([]byte(strings.Repeat("x", maxLine+10) + "\n{}\n"))
	h := HandlerFunc(func(_ context.Context, r Request) Response {
		switch r.Op {
		case OpThrottle:
			if _, err := ParseManual(r); err != nil {
				return Response{Error: err.Error()}
			}
		}
		return Response{OK: true}
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(data), 4096)
		for range 1000 {
			line, err := readLine(br)
			if err == errLineTooLong {
				return
			}
			if len(line) == 0 && err != nil {
				return
			}
			if len(line) > maxLine {
				t.Fatalf("a line of %d bytes passed the %d limit", len(line), maxLine)
			}
			resp := parseAndHandle(context.Background(), h, line)
			if !resp.OK && resp.Error == "" {
				t.Fatalf("line %q: a refusal without a message", line)
			}
		}
	})
}
