package reporthtml

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/net/html"
)

// ErrPage is wrapped by Check's error: a page that breaks the package's contract.
var ErrPage = errors.New("page is not self-contained")

// Check parses page as HTML5 and enforces the pages' contract: a document with a title and a body,
// no script, no external resource (no src or href attribute other than a "#fragment", no link,
// object, embed, iframe or base element, no url() or @import in a style), and every svg element with
// a viewBox. Render, RenderDiff and RenderTimeline check what they return (verify on write).
func Check(page []byte) error {
	doc, err := html.Parse(bytes.NewReader(page))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrPage, err)
	}
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	seen := map[string]int{}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			if n.Data != "title" || n.Parent != nil && n.Parent.Data == "head" {
				seen[n.Data]++ // an SVG <title> is hover text
			}
			switch n.Data {
			case "script", "link", "object", "embed", "iframe", "base", "img", "image", "use", "foreignObject":
				bad("a <%s> element", n.Data)
			case "svg":
				if attr(n, "viewBox") == "" && attr(n, "viewbox") == "" {
					bad("an <svg> without a viewBox")
				}
			case "style":
				if n.FirstChild != nil {
					css := strings.ToLower(n.FirstChild.Data)
					if strings.Contains(css, "url(") || strings.Contains(css, "@import") {
						bad("a style that loads a resource (url() or @import)")
					}
				}
			}
			for _, a := range n.Attr {
				key := strings.ToLower(a.Key)
				switch {
				case key == "src" || key == "srcset" || key == "action" || key == "formaction" || key == "poster":
					bad("<%s %s=%q>", n.Data, a.Key, a.Val)
				case key == "href" || strings.HasSuffix(key, ":href"):
					if !strings.HasPrefix(a.Val, "#") {
						bad("<%s %s=%q>: a link out of the page", n.Data, a.Key, a.Val)
					}
				case strings.HasPrefix(key, "on"):
					bad("<%s %s>: an event handler (script)", n.Data, a.Key)
				case key == "style" && strings.Contains(strings.ToLower(a.Val), "url("):
					bad("<%s style=%q>: url()", n.Data, a.Val)
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	if seen["title"] != 1 || seen["body"] != 1 || seen["main"] != 1 {
		bad("%d <title>, %d <body>, %d <main> elements: want one each", seen["title"], seen["body"], seen["main"])
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrPage, strings.Join(problems, "; "))
	}
	return nil
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}
