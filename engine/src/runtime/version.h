#pragma once
// The engine's name and version, as `hello` and `--version` report them.
namespace runahead {
inline constexpr const char* kEngineVersion = "runahead-engine 0.1.0";
inline constexpr int kProtocolVersion = 1;
}  // namespace runahead
