package sgemm

import (
	"time"
	"unsafe"
)

func ptr(v []float32) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(v)) }

func timeIt(f func()) float64 {
	t := time.Now()
	f()
	return time.Since(t).Seconds()
}
