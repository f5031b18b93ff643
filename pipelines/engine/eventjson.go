package engine

import (
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"
)

// MarshalJSON encodes e as encoding/json encodes the Event struct by its field tags (the same
// bytes; TestEventMarshalJSONMatchesReflection compares them), without reflection: a no-op
// rebuild of a 27B graph emits some 900 plan and node_cached events, and a JSON Lines sink
// encodes every one.
func (e Event) MarshalJSON() ([]byte, error) {
	return e.AppendJSON(make([]byte, 0, 160+len(e.Node)+len(e.Key)+len(e.Error)+len(e.Outputs)*96+len(e.Deps)*48))
}

// AppendJSON appends MarshalJSON's bytes to b (a sink encoding many events reuses one buffer).
func (e Event) AppendJSON(b []byte) ([]byte, error) {
	start := len(b)
	b = append(b, `{"event":`...)
	b = appendJSONString(b, e.Event)
	b = append(b, `,"node":`...)
	b = appendJSONString(b, e.Node)
	b = append(b, `,"key":`...)
	b = appendJSONString(b, e.Key)
	if e.Stage != "" {
		b = append(b, `,"stage":`...)
		b = appendJSONString(b, e.Stage)
	}
	b = append(b, `,"time":"`...)
	b, err := e.Time.AppendText(b) // time.Time's MarshalJSON, unquoted (RFC 3339, strict)
	if err != nil {
		return b[:start], fmt.Errorf("Event.MarshalJSON: %w", err)
	}
	b = append(b, '"')
	if e.Mem != 0 {
		b = append(b, `,"mem":`...)
		b = strconv.AppendInt(b, e.Mem, 10)
	}
	if e.Writes != 0 {
		b = append(b, `,"writes":`...)
		b = strconv.AppendInt(b, e.Writes, 10)
	}
	if e.CostNS != 0 {
		b = append(b, `,"cost_ns":`...)
		b = strconv.AppendInt(b, e.CostNS, 10)
	}
	if len(e.Deps) > 0 {
		b = append(b, `,"deps":[`...)
		for i, d := range e.Deps {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, d)
		}
		b = append(b, ']')
	}
	if e.SameAs != "" {
		b = append(b, `,"same_as":`...)
		b = appendJSONString(b, e.SameAs)
	}
	if e.Checked {
		b = append(b, `,"checked":true`...)
	}
	if e.Bytes != 0 {
		b = append(b, `,"bytes":`...)
		b = strconv.AppendInt(b, e.Bytes, 10)
	}
	if e.DurationMS != 0 {
		b = append(b, `,"duration_ms":`...)
		b = strconv.AppendInt(b, e.DurationMS, 10)
	}
	if len(e.Outputs) > 0 {
		b = append(b, `,"outputs":{`...)
		keys := make([]string, 0, len(e.Outputs))
		for k := range e.Outputs {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = appendJSONString(b, e.Outputs[k])
		}
		b = append(b, '}')
	}
	if e.Error != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, e.Error)
	}
	return append(b, '}'), nil
}

// appendJSONString appends s as a JSON string the way encoding/json writes one without HTML
// escaping (an encoder that escapes HTML re-escapes a Marshaler's output itself): '"' and '\\'
// backslashed, \b \f \n \r \t, other control bytes as \u00XX, invalid UTF-8 as \ufffd, and
// U+2028 and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
