// An io_context run by its own thread, as every peer has one, with helpers to run plain
// functions and coroutines on it from the test's thread and wait for their results.
#pragma once

#include <future>
#include <type_traits>
#include <utility>

#include <asio/co_spawn.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/use_future.hpp>

namespace gossamer::test {

class IoThread {
 public:
  IoThread() : work_(asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}
  // Stops the loop; coroutines still suspended are destroyed with the io_context. Whatever lives
  // on this thread must be destroyed (through call()) before.
  ~IoThread() { stop(); }
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;

  asio::io_context& io() { return io_; }

  void stop() {
    if (!thread_.joinable()) return;
    work_.reset();
    io_.stop();
    thread_.join();
  }

  // Runs the plain function `f` on the io thread and waits for its result (exceptions included).
  template <typename F>
  auto call(F&& f) -> std::invoke_result_t<F> {
    std::packaged_task<std::invoke_result_t<F>()> task(std::forward<F>(f));
    auto result = task.get_future();
    // (A packaged_task itself is an Asio completion token, hence the lambda.)
    asio::post(io_, [&task] { task(); });
    return result.get();
  }

  // Starts the coroutine function `f` on the io thread; the future holds its result.
  template <typename F>
  auto spawn(F&& f) {
    return asio::co_spawn(io_, std::forward<F>(f), asio::use_future);
  }
  // Runs the coroutine function `f` on the io thread and waits for its result.
  template <typename F>
  auto run(F&& f) {
    return spawn(std::forward<F>(f)).get();
  }

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
};

}  // namespace gossamer::test
