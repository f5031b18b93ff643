package procexec

import (
	"context"
	"errors"

	"orkpipe/artifacts"
	"orkpipe/pipelines/engine"
)

// Protocol is the version of the protocol (package doc) this package speaks.
const Protocol = 1

// ErrChild is wrapped by every error that comes of the child process itself rather than of a
// node: it could not be started, it broke the protocol, it exited or refused to start.
var ErrChild = errors.New("executor process")

// Hello is what a child says first: the protocol version, its program name and its build.
type Hello struct {
	Protocol int                    `json:"protocol"`
	Program  string                 `json:"program"`
	Orkpipe  artifacts.OrkpipeBuild `json:"orkpipe"`
}

// request is a line the parent sends.
type request struct {
	ID     uint64              `json:"id"`
	Exec   *engine.ExecRequest `json:"exec,omitempty"`
	Cancel bool                `json:"cancel,omitempty"`
}

// reply is a line the child sends: the hello, a refusal to start (ID 0, Error), or the answer to
// request ID.
type reply struct {
	Hello      *Hello                  `json:"hello,omitempty"`
	ID         uint64                  `json:"id,omitempty"`
	Outputs    []artifacts.NamedObject `json:"outputs,omitempty"`
	Provenance *artifacts.Provenance   `json:"provenance,omitempty"`
	Error      string                  `json:"error,omitempty"`
	Is         []string                `json:"is,omitempty"`
}

// sentinels are the errors whose identity crosses the process boundary, by wire name.
var sentinels = []struct {
	name string
	err  error
}{
	{"canceled", context.Canceled},
	{"deadline", context.DeadlineExceeded},
	{"corrupt", artifacts.ErrCorrupt},
	{"not-found", artifacts.ErrNotFound},
}

// errorReply returns the wire form of err.
func errorReply(id uint64, err error) reply {
	r := reply{ID: id, Error: err.Error()}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			r.Is = append(r.Is, s.name)
		}
	}
	return r
}

// remoteError is an error the child reported: its message, and the sentinels it wrapped there.
type remoteError struct {
	msg string
	is  []error
}

func (e *remoteError) Error() string   { return e.msg }
func (e *remoteError) Unwrap() []error { return e.is }

// remote returns the error r reports (names not in sentinels are ignored: a newer child's).
func (r reply) remote() error {
	e := &remoteError{msg: r.Error}
	for _, name := range r.Is {
		for _, s := range sentinels {
			if s.name == name {
				e.is = append(e.is, s.err)
			}
		}
	}
	return e
}
