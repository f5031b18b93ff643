package registry

// EventKind says what a progress Event reports.
type EventKind int

const (
	// EventStart: a file's transfer begins; Total is the bytes that will cross the network for it.
	EventStart EventKind = iota
	// EventBytes: Bytes more bytes of the file crossed the network (a retried part counts again).
	EventBytes
	// EventSkipped: the file was already present and verified (pull) or already in the registry (push).
	EventSkipped
	// EventDone: the file is complete and verified; Err is set when it failed instead.
	EventDone
)

// Event is one progress report about one file.
type Event struct {
	Kind  EventKind
	File  string
	Total int64
	Bytes int64
	Err   error
}

// Progress receives transfer events. Report is called from several goroutines at once.
type Progress interface {
	Report(Event)
}

// ProgressFunc adapts a function to Progress.
type ProgressFunc func(Event)

// Report calls f.
func (f ProgressFunc) Report(e Event) { f(e) }

type nopProgress struct{}

func (nopProgress) Report(Event) {}
