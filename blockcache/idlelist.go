package blockcache

// links put a value into an idleList; a value embeds them.
type links[T any] struct {
	prev, next *T
	idle       bool // in the list
}

// idleList is an intrusive doubly linked list of idle values, least
// recently used at the front: pushing and removing allocate nothing, and a
// value knows whether it is in the list. Its owner's lock guards it.
type idleList[T any] struct {
	head, tail *T
	links      func(*T) *links[T]
}

func newIdleList[T any](links func(*T) *links[T]) idleList[T] {
	return idleList[T]{links: links}
}

// push puts v at the back, as the most recently used.
func (l *idleList[T]) push(v *T) {
	lv := l.links(v)
	lv.idle, lv.prev, lv.next = true, l.tail, nil
	if l.tail != nil {
		l.links(l.tail).next = v
	} else {
		l.head = v
	}
	l.tail = v
}

// remove takes v out of the list if it is in it, and reports whether it was.
func (l *idleList[T]) remove(v *T) bool {
	lv := l.links(v)
	if !lv.idle {
		return false
	}
	if lv.prev != nil {
		l.links(lv.prev).next = lv.next
	} else {
		l.head = lv.next
	}
	if lv.next != nil {
		l.links(lv.next).prev = lv.prev
	} else {
		l.tail = lv.prev
	}
	lv.idle, lv.prev, lv.next = false, nil, nil
	return true
}
