// A doubly linked list threaded through its elements: each element holds a ListLink for every
// list it can be on, so linking and unlinking allocate nothing and cost O(1). The shard's timer
// lists, the file cache's two LRU orders, its waiters and its woken queue, the send queue's two
// orders, and TlsLoop's waiting ClientHellos and closing connections are all one of these. (io's
// CompletionQueue is singly linked on purpose: every connection holds a Completion for its receive,
// and a FIFO needs one pointer there, not two.)
//
//   struct Entry { ListLink<Entry> lru; ... };
//   IntrusiveList<Entry, &Entry::lru> lru;
//   lru.PushBack(e);                        // newest last
//   for (Entry* e = lru.front(); e != nullptr; e = lru.Next(e)) ...
//   lru.Remove(e);
//
// An element is on at most one list per link; the list does not record which list that is (the
// owner does, as its state), but Remove asserts that the element is linked where it says.
#pragma once

#include <cstddef>

#include "io/assert.h"

namespace ringd::mem {

template <typename T>
struct ListLink {
  T* prev = nullptr;
  T* next = nullptr;
};

template <typename T, ListLink<T> T::*Link>
class IntrusiveList {
 public:
  IntrusiveList() = default;
  IntrusiveList(const IntrusiveList&) = delete;
  IntrusiveList& operator=(const IntrusiveList&) = delete;

  T* front() const { return head_; }
  T* back() const { return tail_; }
  bool empty() const { return head_ == nullptr; }
  size_t size() const { return size_; }
  static T* Next(const T* t) { return (t->*Link).next; }
  static T* Prev(const T* t) { return (t->*Link).prev; }

  void PushBack(T* t) {
    ListLink<T>& l = t->*Link;
    RINGD_ASSERT(l.prev == nullptr && l.next == nullptr && head_ != t);
    l.prev = tail_;
    (tail_ != nullptr ? (tail_->*Link).next : head_) = t;
    tail_ = t;
    ++size_;
  }

  void PushFront(T* t) {
    ListLink<T>& l = t->*Link;
    RINGD_ASSERT(l.prev == nullptr && l.next == nullptr && head_ != t);
    l.next = head_;
    (head_ != nullptr ? (head_->*Link).prev : tail_) = t;
    head_ = t;
    ++size_;
  }

  void Remove(T* t) {
    ListLink<T>& l = t->*Link;
    RINGD_ASSERT(l.prev != nullptr ? (l.prev->*Link).next == t : head_ == t);
    RINGD_ASSERT(l.next != nullptr ? (l.next->*Link).prev == t : tail_ == t);
    (l.prev != nullptr ? (l.prev->*Link).next : head_) = l.next;
    (l.next != nullptr ? (l.next->*Link).prev : tail_) = l.prev;
    l.prev = l.next = nullptr;
    --size_;
  }

  // Forgets every element without touching them: for an owner tearing down, whose elements
  // are never linked again.
  void Abandon() {
    head_ = tail_ = nullptr;
    size_ = 0;
  }

  // Whether `t` is on this list (an element of another list through the same link is not).
  bool Contains(const T* t) const {
    const ListLink<T>& l = t->*Link;
    return l.prev != nullptr ? (l.prev->*Link).next == t : head_ == t;
  }

  // The front element, unlinked; nullptr when empty.
  T* PopFront() {
    T* t = head_;
    if (t != nullptr) Remove(t);
    return t;
  }

  // Moves an element to the back (the most recent, in an LRU order), linking it if it is not on
  // the list yet.
  void MoveToBack(T* t) {
    if (tail_ == t) return;
    if (Contains(t)) Remove(t);
    PushBack(t);
  }

 private:
  T* head_ = nullptr;
  T* tail_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ringd::mem
