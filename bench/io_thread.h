// An io_context with a thread running it, for the benchmarks that drive transports and meshes by
// hand (shaped_bench.cc, relay_bench.cc).
#pragma once

#include <future>
#include <memory>
#include <thread>
#include <type_traits>
#include <utility>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>

namespace gossamer::bench {

class IoThread {
 public:
  IoThread() : work_(asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}
  ~IoThread() {
    work_.reset();
    io_.stop();
    thread_.join();
  }
  asio::io_context& io() { return io_; }

  // Runs `f` on the thread and returns its result.
  template <typename F>
  auto call(F&& f) {
    // Wrapped in a lambda: asio::post treats a bare packaged_task as a completion token and
    // takes its future itself.
    auto task = std::make_shared<std::packaged_task<std::invoke_result_t<F>()>>(std::forward<F>(f));
    auto result = task->get_future();
    asio::post(io_, [task] { (*task)(); });
    return result.get();
  }

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
};

}  // namespace gossamer::bench
