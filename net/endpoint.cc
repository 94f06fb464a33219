#include "net/endpoint.h"

#include <charconv>

#include <fmt/format.h>

#include "engine/base/enforce.h"

namespace gossamer::net {

Endpoint Endpoint::parse(const std::string& text) {
  const std::size_t colon = text.rfind(':');
  GOSSAMER_ENFORCE(colon != std::string::npos, "endpoint '{}' needs the form HOST:PORT", text);
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  GOSSAMER_ENFORCE(!host.empty(), "endpoint '{}' has an empty host", text);
  const std::string portText = text.substr(colon + 1);
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(portText.data(), portText.data() + portText.size(), port);
  GOSSAMER_ENFORCE(ec == std::errc() && end == portText.data() + portText.size() && port <= 65535,
                   "endpoint '{}' has an invalid port '{}' (0-65535)", text, portText);
  return Endpoint{std::move(host), static_cast<std::uint16_t>(port)};
}

std::string Endpoint::str() const {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                             : fmt::format("{}:{}", host, port);
}

}  // namespace gossamer::net
