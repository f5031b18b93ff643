package boardhost

import (
	"bytes"
	"io"
	"sync"
)

// maxTailLine bounds one line kept in the tail.
const maxTailLine = 4096

// outputSink receives a command's combined stdout and stderr: it splits lines, feeds them to the
// perplexity parser, keeps the last n lines and optionally copies everything to w. It holds at
// most one partial line (bounded by maxLine) plus the tail, whatever the output's size.
type outputSink struct {
	mu      sync.Mutex
	n       int
	tail    []string // ring of the last n lines
	next    int
	full    bool
	partial []byte
	parser  Parser
	copyTo  io.Writer
}

func newOutputSink(n int, copyTo io.Writer) *outputSink {
	return &outputSink{n: n, tail: make([]string, n), copyTo: copyTo}
}

// Write implements io.Writer. It never fails because of the copy writer: a failing copy is
// dropped so that the run is judged on its own outcome.
func (s *outputSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.copyTo != nil {
		if _, err := s.copyTo.Write(p); err != nil {
			s.copyTo = nil
		}
	}
	rest := p
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			s.appendPartial(rest)
			break
		}
		s.appendPartial(rest[:i])
		s.endLine()
		rest = rest[i+1:]
	}
	return len(p), nil
}

func (s *outputSink) appendPartial(b []byte) {
	if room := maxLine - len(s.partial); room > 0 {
		s.partial = append(s.partial, b[:min(len(b), room)]...)
	}
}

func (s *outputSink) endLine() {
	line := string(bytes.TrimRight(s.partial, "\r"))
	s.partial = s.partial[:0]
	s.parser.ParseLine(line)
	if s.n == 0 {
		return
	}
	if len(line) > maxTailLine {
		line = line[:maxTailLine] + " [...]"
	}
	s.tail[s.next] = line
	s.next = (s.next + 1) % s.n
	if s.next == 0 {
		s.full = true
	}
}

// finish flushes a last line without a newline and returns the parse result and the tail.
func (s *outputSink) finish() (*Scores, []string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.partial) > 0 {
		s.endLine()
	}
	var tail []string
	if s.full {
		tail = append(tail, s.tail[s.next:]...)
	}
	tail = append(tail, s.tail[:s.next]...)
	scores, err := s.parser.Result()
	return scores, tail, err
}
