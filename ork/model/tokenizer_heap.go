package model

// bigramHeap is a binary heap ordered by before (the element to pop first comes before the others);
// both merge tokenizers keep their candidate bigrams in one.
type bigramHeap[T any] struct {
	h      []T
	before func(a, b *T) bool
}

func (q *bigramHeap[T]) reset()   { q.h = q.h[:0] }
func (q *bigramHeap[T]) len() int { return len(q.h) }

func (q *bigramHeap[T]) push(x T) {
	q.h = append(q.h, x)
	for i := len(q.h) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.before(&q.h[i], &q.h[p]) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

func (q *bigramHeap[T]) pop() T {
	top := q.h[0]
	last := len(q.h) - 1
	q.h[0] = q.h[last]
	q.h = q.h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < last && q.before(&q.h[l], &q.h[m]) {
			m = l
		}
		if r < last && q.before(&q.h[r], &q.h[m]) {
			m = r
		}
		if m == i {
			break
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
	return top
}
