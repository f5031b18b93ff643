package depcheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
)

// skipPolicy is the one file that calls testing's Skip methods, for every other test: the skip
// classes (module-relative, slash-separated).
const skipPolicy = "internal/testfiles/skip.go"

// rawSkipNames are the methods of testing.T, B, F and TB that skip.
var rawSkipNames = map[string]bool{"Skip": true, "Skipf": true, "SkipNow": true}

// RawSkips returns every call of a method named Skip, Skipf or SkipNow, on any receiver (t, b, f, tb,
// ...), in the Go files of the module whose directory is root, in the files' lexical order and each
// file's source order, each as "file:line: recv.Skipf(...)" with file relative to root. A test skips
// through internal/testfiles's classes instead, which name the reason's class and decide what CI does;
// the one file that calls the methods, internal/testfiles/skip.go, is not read, nor are testdata
// folders, .git, or folders of another module (a go.mod of their own: internal/testregistry, .dagger).
// An error is a file or folder that cannot be read or a file that does not parse.
func RawSkips(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if path == root {
				return nil
			}
			if d.Name() == "testdata" || d.Name() == ".git" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if filepath.Ext(path) != ".go" || rel == skipPolicy {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		calls, err := rawSkipCalls(rel, src)
		out = append(out, calls...)
		return err
	})
	return out, err
}

// rawSkipCalls returns the calls of Skip, Skipf and SkipNow in one Go file's source, named as
// RawSkips names them.
func rawSkipCalls(name string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !rawSkipNames[sel.Sel.Name] {
			return true
		}
		recv := "…"
		if id, ok := sel.X.(*ast.Ident); ok {
			recv = id.Name
		}
		out = append(out, fmt.Sprintf("%s:%d: %s.%s(...)", name, fset.Position(call.Pos()).Line, recv, sel.Sel.Name))
		return true
	})
	return out, nil
}
