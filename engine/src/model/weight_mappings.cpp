#include "model/weight_mappings.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "model/model_error.h"

namespace runahead {

namespace {

// A fixed table of atomics: the handler may read it at any moment and must not allocate or lock.
constexpr int kSlots = 64;
struct Slot {
  std::atomic<uintptr_t> begin{0}, end{0};  // begin 0: free
  std::atomic<bool> faulted{false};
};
Slot g_slots[kSlots];
std::atomic<bool> g_any_fault{false};
std::atomic<uintptr_t> g_page_size{4096};

std::mutex g_registry_mutex;  // guards slot allocation and the file names, never taken by the handler
std::string g_files[kSlots];

void on_sigbus(int, siginfo_t* info, void*) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  if (info->si_code > 0) {  // raised by the kernel for a memory access, not sent by kill()
    for (Slot& slot : g_slots) {
      const uintptr_t begin = slot.begin.load(std::memory_order_acquire);
      if (begin == 0 || addr < begin || addr >= slot.end.load(std::memory_order_acquire)) continue;
      const uintptr_t page_size = g_page_size.load(std::memory_order_relaxed);
      void* page = reinterpret_cast<void*>(addr & ~(page_size - 1));
      if (::mmap(page, page_size, PROT_READ, MAP_FIXED | MAP_ANONYMOUS | MAP_PRIVATE, -1, 0) == MAP_FAILED) break;
      slot.faulted.store(true, std::memory_order_release);
      g_any_fault.store(true, std::memory_order_release);
      return;  // the faulting read runs again and reads zeros
    }
  }
  // Not ours: the default action, as if there were no handler.
  ::signal(SIGBUS, SIG_DFL);
  ::raise(SIGBUS);
}

// Installs the handler unless it is the one in place (a test framework may have put its own back).
void install_handler() {
  struct sigaction current {};
  ::sigaction(SIGBUS, nullptr, &current);
  if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_sigbus) return;
  g_page_size.store(uintptr_t(::sysconf(_SC_PAGESIZE)), std::memory_order_relaxed);
  struct sigaction action {};
  action.sa_sigaction = on_sigbus;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, nullptr);
}

}  // namespace

int guard_mapping(const void* begin, size_t size, const std::string& file) {
  std::lock_guard lock(g_registry_mutex);
  install_handler();
  for (int i = 0; i < kSlots; ++i) {
    Slot& slot = g_slots[i];
    if (slot.begin.load(std::memory_order_relaxed) != 0) continue;
    g_files[i] = file;
    slot.faulted.store(false, std::memory_order_relaxed);
    slot.end.store(reinterpret_cast<uintptr_t>(begin) + size, std::memory_order_release);
    slot.begin.store(reinterpret_cast<uintptr_t>(begin), std::memory_order_release);
    return i;
  }
  return -1;
}

void unguard_mapping(int index) {
  if (index < 0) return;
  std::lock_guard lock(g_registry_mutex);
  Slot& slot = g_slots[index];
  slot.begin.store(0, std::memory_order_release);
  slot.end.store(0, std::memory_order_release);
  slot.faulted.store(false, std::memory_order_release);
  g_files[index].clear();
  bool any = false;
  for (const Slot& s : g_slots) any |= s.faulted.load(std::memory_order_acquire);
  g_any_fault.store(any, std::memory_order_release);
}

bool in_weight_mapping(const void* p) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  for (const Slot& slot : g_slots) {
    const uintptr_t begin = slot.begin.load(std::memory_order_acquire);
    if (begin != 0 && at >= begin && at < slot.end.load(std::memory_order_acquire)) return true;
  }
  return false;
}

void check_mappings_intact() {
  if (!g_any_fault.load(std::memory_order_acquire)) return;
  std::string file;
  {
    std::lock_guard lock(g_registry_mutex);
    for (int i = 0; i < kSlots && file.empty(); ++i)
      if (g_slots[i].faulted.load(std::memory_order_acquire)) file = g_files[i];
  }
  if (file.empty()) return;  // unguarded meanwhile: that model is gone
  model_error(file, "", "changed while loaded (truncated or rewritten in place); reload the model",
              "weight files left unchanged while the model is loaded");
}

}  // namespace runahead
