package sample

import (
	"errors"
	"fmt"
	"strings"
)

// Stack is a bounded stack of ints.
type Stack struct {
	items []int
	limit int
}

var ErrFull = errors.New("stack full")

func NewStack(limit int) *Stack {
	return &Stack{limit: limit}
}

func (s *Stack) Push(v int) error {
	if len(s.items) >= s.limit {
		return ErrFull
	}
	s.items = append(s.items, v)
	return nil
}

func (s *Stack) Pop() (int, bool) {
	if len(s.items) == 0 {
		return 0, false
	}
	v := s.items[len(s.items)-1]
	s.items = s.items[:len(s.items)-1]
	return v, true
}

func Sum(xs []int) (total int) {
	for i, x := range xs {
		if i%2 == 0 {
			total += x
		} else {
			total -= x
		}
	}
	return
}

func Describe(m map[string]int) string {
	/* keys in map order */
	var b strings.Builder
	for k, v := range m {
		fmt.Fprintf(&b, "%s=%d;", k, v)
	}
	return b.String()
}
