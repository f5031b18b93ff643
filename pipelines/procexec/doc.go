// Package procexec runs an engine.Executor in a child process. Client, the parent's side, is an
// engine.ProvenanceExecutor that hands each node to a child started from a command; Serve, the
// child's side, answers with the executor it is given. orkpipe's Dagger executor runs this way
// (cmd/orkpipe-dagger serves package daggerexec): the orkpipe binary then does not link the
// Dagger SDK, about 200 packages (grpc, OpenTelemetry, protobuf) whose initialisation and size
// every orkpipe command paid at start-up, a no-op rebuild or a hash of a small file included.
//
// The parent keeps everything but execution: keys, the action cache, the memory budget. Both
// processes open the same store (a store is safe for several processes); a request names its
// inputs and tools by path and digest in that store, and a reply names the outputs the child
// stored there, with the provenance of the run.
//
// # Protocol
//
// JSON Lines: requests on the child's stdin, replies on its stdout, one JSON object per line; the
// child's stderr is its log and is not read by this package. Version 1:
//
//	child -> parent   {"hello": {"protocol": 1, "program": NAME, "orkpipe": BUILD}}
//	                  or, when the executor cannot start, {"error": MESSAGE, "is": [SENTINEL...]}
//	                  and the child exits
//	parent -> child   {"id": N, "exec": REQUEST}      one node: engine.ExecRequest as JSON; N > 0,
//	                                                  unique within the session
//	parent -> child   {"id": N, "cancel": true}       the node's context ended
//	child -> parent   {"id": N, "outputs": [...], "provenance": {...}}
//	                  or {"id": N, "error": MESSAGE, "is": [SENTINEL...]}, once per request
//
// BUILD is artifacts.OrkpipeBuild of the child's binary. SENTINEL names the errors of this list
// that the error wraps, so that errors.Is works across the process boundary: "canceled"
// (context.Canceled), "deadline" (context.DeadlineExceeded), "corrupt" (artifacts.ErrCorrupt),
// "not-found" (artifacts.ErrNotFound). A request canceled by the parent is answered like any
// other, once the executor has returned (its scratch files removed). The parent closing stdin
// ends the session: the child cancels what is still running, closes its executor and exits 0.
//
// A child that sends anything else (a line that is not one of these objects, an id it was not
// asked, a second hello), or that exits while nodes are in flight, fails those nodes and every
// later one with ErrChild; the Client is not reused after that.
package procexec
