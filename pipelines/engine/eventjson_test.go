package engine

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// plainEvent has Event's fields and tags but not its MarshalJSON: encoding/json's reflection.
type plainEvent Event

func encodeBoth(t *testing.T, e Event, escapeHTML bool) (got, want []byte) {
	t.Helper()
	var a, b bytes.Buffer
	ea, eb := json.NewEncoder(&a), json.NewEncoder(&b)
	ea.SetEscapeHTML(escapeHTML)
	eb.SetEscapeHTML(escapeHTML)
	if err := ea.Encode(e); err != nil {
		t.Fatalf("Encode(%+v): %v", e, err)
	}
	if err := eb.Encode(plainEvent(e)); err != nil {
		t.Fatalf("Encode(plain %+v): %v", e, err)
	}
	return a.Bytes(), b.Bytes()
}

// TestEventMarshalJSONMatchesReflection: Event.MarshalJSON writes the bytes encoding/json writes
// for the struct's tags, with and without HTML escaping, for empty, full and awkward events.
func TestEventMarshalJSONMatchesReflection(t *testing.T) {
	awkward := "q\"b\\s/\b\f\n\r\t\x00\x1f\x7f <&> é \u2028\u2029 \xff\xfe end"
	for i, e := range []Event{
		{},
		{Event: EventPlan, Node: "rtn-tile:blk.0.attn_q.weight", Stage: "rtn-tile", Time: time.Unix(1796200480, 306868363).UTC(), Mem: 1 << 20, Writes: 55706152, CostNS: 41000000000, Deps: []string{"synth", "b"}},
		{Event: EventNodeCached, Node: "n", Key: "blake3:00ff", Stage: "s", Time: time.Date(2026, 12, 2, 8, 0, 0, 0, time.FixedZone("x", 5*3600+1800)), SameAs: "m",
			Outputs: map[string]string{"z": "blake3:1", "a": "blake3:2", "m<": awkward}},
		{Event: EventNodeFailed, Node: awkward, Key: awkward, Stage: awkward, Time: time.Now(), Mem: -3, Deps: []string{awkward, ""}, SameAs: awkward, DurationMS: 12345, Outputs: map[string]string{awkward: awkward, "": ""}, Error: awkward},
		{Event: EventNodeFinished, Node: "x", DurationMS: -1, Deps: []string{}, Outputs: map[string]string{}, Summary: &Summary{Event: EventSummary}},
	} {
		for _, html := range []bool{false, true} {
			got, want := encodeBoth(t, e, html)
			if !bytes.Equal(got, want) {
				t.Errorf("event %d (escape HTML %v):\n got %s\nwant %s", i, html, got, want)
			}
		}
	}
	if _, err := json.Marshal(Event{Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}); err == nil {
		t.Error("an event time past year 9999 encoded; encoding/json refuses it")
	}
}

// FuzzEventMarshalJSON: any strings give the bytes encoding/json's reflection gives.
func FuzzEventMarshalJSON(f *testing.F) {
	f.Add("plan", "n", "blake3:ab", "s", "dep", "out", "digest", "err", int64(7))
	f.Add("\u2028", "\xff", "<>&", "\x00", "\"", "\\", "é", "\t", int64(-1))
	f.Fuzz(func(t *testing.T, ev, node, key, stage, dep, out, digest, msg string, n int64) {
		e := Event{Event: ev, Node: node, Key: key, Stage: stage, Time: time.Unix(n%1e10, n%1e9), Mem: n, Writes: n, CostNS: n, Deps: []string{dep},
			SameAs: dep, DurationMS: n, Outputs: map[string]string{out: digest, digest: out}, Error: msg}
		for _, html := range []bool{false, true} {
			got, want := encodeBoth(t, e, html)
			if !bytes.Equal(got, want) {
				t.Fatalf("escape HTML %v:\n got %s\nwant %s", html, got, want)
			}
		}
	})
}

// TestEventMarshalJSONEveryField sets every field of Event, found by reflection, to a value that is
// not its zero value and compares with encoding/json: a field added to Event and not to MarshalJSON
// fails here, not only when some other test happens to set it.
func TestEventMarshalJSONEveryField(t *testing.T) {
	var e Event
	v := reflect.ValueOf(&e).Elem()
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		switch x := f.Addr().Interface().(type) {
		case *string:
			*x = sf.Name + "<value>"
		case *int64:
			*x = int64(1000 + i)
		case *bool:
			*x = true
		case *[]string:
			*x = []string{sf.Name, "b"}
		case *map[string]string:
			*x = map[string]string{sf.Name: "v", "a": "w"}
		case *time.Time:
			*x = time.Unix(1796200480, int64(i)).UTC()
		case **Summary:
			*x = nil // `json:"-"`: Emit writes a summary on its own; MarshalJSON leaves it out
		default:
			t.Fatalf("Event.%s is a %s, which this test does not fill: fill it here and encode it in MarshalJSON", sf.Name, sf.Type)
		}
	}
	got, want := encodeBoth(t, e, true)
	if !bytes.Equal(got, want) {
		t.Errorf("every field set:\n got %s\nwant %s", got, want)
	}
}
