// Lock discipline the compiler checks: Clang's thread-safety analysis (-Wthread-safety, on in
// every Clang build: the fuzz tree CI builds is one), as LevelDB's port/thread_annotations.h.
//
//   class Registry {
//     void Add(Item item) FF_EXCLUDES(mu_) { MutexLock lock(&mu_); AddLocked(item); }
//     void AddLocked(Item item) FF_REQUIRES(mu_);   // the caller holds mu_
//     Mutex mu_;
//     std::vector<Item> items_ FF_GUARDED_BY(mu_);  // read or written only with mu_ held
//   };
//
// libstdc++'s std::mutex carries no annotations, so guarded state is guarded by ff::Mutex, and
// held with ff::MutexLock (a scope) or ff::UniqueLock (a scope that a CondVar may release while it
// waits). A lambda run under the lock (a wait's predicate) states it with mu_.AssertHeld().
// Under GCC the macros expand to nothing.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define FF_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define FF_THREAD_ANNOTATION(x)
#endif

#define FF_CAPABILITY(x) FF_THREAD_ANNOTATION(capability(x))
#define FF_SCOPED_CAPABILITY FF_THREAD_ANNOTATION(scoped_lockable)
#define FF_GUARDED_BY(x) FF_THREAD_ANNOTATION(guarded_by(x))
#define FF_PT_GUARDED_BY(x) FF_THREAD_ANNOTATION(pt_guarded_by(x))
#define FF_REQUIRES(...) FF_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define FF_EXCLUDES(...) FF_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define FF_ACQUIRE(...) FF_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define FF_RELEASE(...) FF_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define FF_TRY_ACQUIRE(...) FF_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define FF_ASSERT_CAPABILITY(x) FF_THREAD_ANNOTATION(assert_capability(x))
#define FF_RETURN_CAPABILITY(x) FF_THREAD_ANNOTATION(lock_returned(x))
#define FF_NO_THREAD_SAFETY_ANALYSIS FF_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace ff {

// A std::mutex the analysis knows. Lockable, so std::condition_variable_any and std::lock_guard
// take it too (without the analysis seeing them: prefer MutexLock / UniqueLock).
class FF_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() FF_ACQUIRE() { mu_.lock(); }
  void unlock() FF_RELEASE() { mu_.unlock(); }
  bool try_lock() FF_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds it (where it cannot see so: a wait's predicate).
  void AssertHeld() const FF_ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class FF_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) FF_ACQUIRE(mu) : mu_(mu) { mu_->lock(); }
  ~MutexLock() FF_RELEASE() { mu_->unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Holds a Mutex for its scope; a std::condition_variable_any may release and retake it while it
// waits (`cv.wait(lock, [&] { mu.AssertHeld(); return ready_; })`).
class FF_SCOPED_CAPABILITY UniqueLock {
 public:
  explicit UniqueLock(Mutex* mu) FF_ACQUIRE(mu) : mu_(mu) { mu_->lock(); }
  ~UniqueLock() FF_RELEASE() {
    if (held_) mu_->unlock();
  }
  UniqueLock(const UniqueLock&) = delete;
  UniqueLock& operator=(const UniqueLock&) = delete;

  void lock() FF_ACQUIRE() {
    mu_->lock();
    held_ = true;
  }
  void unlock() FF_RELEASE() {
    held_ = false;
    mu_->unlock();
  }

 private:
  friend class CondVar;
  Mutex* const mu_;
  bool held_ = true;
};

// A std::condition_variable that waits with a UniqueLock (on the Mutex's own std::mutex: no
// std::condition_variable_any in the way).
class CondVar {
 public:
  void notify_one() { cv_.notify_one(); }
  void notify_all() { cv_.notify_all(); }

  void wait(UniqueLock& lock) {
    std::unique_lock<std::mutex> native(lock.mu_->mu_, std::adopt_lock);
    cv_.wait(native);
    native.release();  // still held, by `lock`
  }
  template <typename Pred>
  void wait(UniqueLock& lock, Pred pred) {
    std::unique_lock<std::mutex> native(lock.mu_->mu_, std::adopt_lock);
    cv_.wait(native, pred);
    native.release();  // still held, by `lock`
  }
  template <typename Rep, typename Period>
  std::cv_status wait_for(UniqueLock& lock, std::chrono::duration<Rep, Period> timeout) {
    std::unique_lock<std::mutex> native(lock.mu_->mu_, std::adopt_lock);
    const std::cv_status st = cv_.wait_for(native, timeout);
    native.release();
    return st;
  }
  template <typename Rep, typename Period, typename Pred>
  bool wait_for(UniqueLock& lock, std::chrono::duration<Rep, Period> timeout, Pred pred) {
    std::unique_lock<std::mutex> native(lock.mu_->mu_, std::adopt_lock);
    const bool met = cv_.wait_for(native, timeout, pred);
    native.release();
    return met;
  }
  template <typename Clock, typename Duration>
  std::cv_status wait_until(UniqueLock& lock, std::chrono::time_point<Clock, Duration> deadline) {
    std::unique_lock<std::mutex> native(lock.mu_->mu_, std::adopt_lock);
    const std::cv_status st = cv_.wait_until(native, deadline);
    native.release();
    return st;
  }
  template <typename Clock, typename Duration, typename Pred>
  bool wait_until(UniqueLock& lock, std::chrono::time_point<Clock, Duration> deadline, Pred pred) {
    std::unique_lock<std::mutex> native(lock.mu_->mu_, std::adopt_lock);
    const bool met = cv_.wait_until(native, deadline, pred);
    native.release();
    return met;
  }

 private:
  std::condition_variable cv_;
};

}  // namespace ff
