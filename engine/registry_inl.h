// Template definitions of engine/registry.h.
#pragma once

#include <fmt/format.h>

#include "engine/base/enforce.h"

namespace gossamer::engine {

template <typename Factory>
void NamedFactories<Factory>::add(const std::string& name, std::string description,
                                  Factory factory) {
  GOSSAMER_ENFORCE(!contains(name), "{} '{}' is registered twice", kind_, name);
  entries_.emplace(name, std::make_pair(std::move(description), std::move(factory)));
}

template <typename Factory>
const Factory& NamedFactories<Factory>::get(const std::string& name) const {
  auto it = entries_.find(name);
  GOSSAMER_ENFORCE(it != entries_.end(), "unknown {} '{}' (known: {})", kind_, name,
                   fmt::join(names(), ", "));
  return it->second.second;
}

template <typename Factory>
std::vector<std::string> NamedFactories<Factory>::names() const {
  std::vector<std::string> result;
  for (const auto& [name, entry] : entries_) result.push_back(name);
  return result;
}

template <typename Factory>
const std::string& NamedFactories<Factory>::description(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) get(name);  // throws, listing the known names
  return it->second.first;
}

template <typename Factory>
std::string NamedFactories<Factory>::describe() const {
  std::string text;
  for (const auto& [name, entry] : entries_) text += fmt::format("  {:<16} {}\n", name, entry.first);
  return text;
}

}  // namespace gossamer::engine
