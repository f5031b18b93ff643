//go:build amd64 && !amd64.v3

package stages

// goArith names the arithmetic of this binary's compiled Go float code in its numerics: "" for amd64
// at GOAMD64 v1 or v2 (the default), where the compiler has no fused multiply-add to use, so every
// x*y + z rounds twice — the arithmetic every pure-Go node key has always meant.
const goArith = ""
