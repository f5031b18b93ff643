package boardhost

import (
	"fmt"
	"strings"
)

// SplitCommand splits a command line into argv without a shell, by the rules in the package
// documentation: blanks separate words; '...' is literal; "..." is literal except that \" and \\
// are escapes; outside quotes a backslash escapes the next character. An empty command, an
// unterminated quote or a trailing backslash is an error wrapping [ErrCommand].
func SplitCommand(line string) ([]string, error) {
	var (
		argv    []string
		cur     strings.Builder
		inWord  bool
		quote   byte // 0, '\'' or '"'
		quoteAt int
	)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch quote {
		case '\'':
			if c == '\'' {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
			continue
		case '"':
			switch {
			case c == '"':
				quote = 0
			case c == '\\' && i+1 < len(line) && (line[i+1] == '"' || line[i+1] == '\\'):
				i++
				cur.WriteByte(line[i])
			default:
				cur.WriteByte(c)
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			if inWord {
				argv = append(argv, cur.String())
				cur.Reset()
				inWord = false
			}
		case '\'', '"':
			quote, quoteAt, inWord = c, i, true
		case '\\':
			if i+1 == len(line) {
				return nil, fmt.Errorf("%w: trailing backslash in %q", ErrCommand, line)
			}
			i++
			cur.WriteByte(line[i])
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("%w: unterminated %c quote at byte %d in %q", ErrCommand, quote, quoteAt, line)
	}
	if inWord {
		argv = append(argv, cur.String())
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("%w: empty command", ErrCommand)
	}
	return argv, nil
}

// Inputs are the files a run is about. Pack is required; Stub and Text may be empty when the
// command does not name them.
type Inputs struct {
	Pack string
	Stub string
	Text string
}

// ExpandCommand replaces {pack}, {stub} and {text} in every word of argv. Any other
// {identifier} is an error (a typo such as {pak} would otherwise reach the runtime as a literal
// path), as is a placeholder whose input is empty, and argv that names neither {pack} nor {stub}.
func ExpandCommand(argv []string, in Inputs) ([]string, error) {
	values := map[string]string{"pack": in.Pack, "stub": in.Stub, "text": in.Text}
	used := map[string]bool{}
	out := make([]string, len(argv))
	for i, word := range argv {
		var b strings.Builder
		rest := word
		for {
			open := strings.IndexByte(rest, '{')
			if open < 0 {
				b.WriteString(rest)
				break
			}
			end := strings.IndexByte(rest[open:], '}')
			if end < 0 || !isIdent(rest[open+1:open+end]) {
				// Not a placeholder (e.g. a JSON argument): keep the brace literally.
				b.WriteString(rest[:open+1])
				rest = rest[open+1:]
				continue
			}
			name := rest[open+1 : open+end]
			val, known := values[name]
			if !known {
				return nil, fmt.Errorf("%w: unknown placeholder {%s} in argument %d %q (known: {pack}, {stub}, {text})", ErrCommand, name, i, word)
			}
			if val == "" {
				return nil, fmt.Errorf("%w: argument %d %q uses {%s} but no %s path was given", ErrCommand, i, word, name, name)
			}
			used[name] = true
			b.WriteString(rest[:open])
			b.WriteString(val)
			rest = rest[open+end+1:]
		}
		out[i] = b.String()
	}
	if !used["pack"] && !used["stub"] {
		return nil, fmt.Errorf("%w: the command names neither {pack} nor {stub}, so it cannot exercise the pack under verification: %q", ErrCommand, strings.Join(argv, " "))
	}
	return out, nil
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
