//go:build purego

package consts

const (
	HasAVX2  = false
	HasSSE41 = false
)
