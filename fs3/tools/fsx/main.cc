// fs3-fsx: a seeded file-system exerciser (fsx.h) for fs3's FUSE mount and its native client.
//
//   fs3-fsx --seed 7 --ops 100000 DIR                 # files DIR/fsx.7.0 ... on a mount
//   fs3-fsx --seed 7 --ops 100000 --other DIR2 DIR    # also read after close/fsync on DIR2
//   fs3-fsx --no-mmap --files 3 --max-size 4MiB DIR
//   fs3-fsx --native --meta HOST:PORT --mgmtd HOST:PORT /fs3/dir   # no mount: fs3/fs.h
//
// Exit status 0 when every byte read matched; 1 on a mismatch (the report and the replay command
// on stderr) or a failed operation (named, with its error); 64 on bad arguments. The last line
// on success is one JSON object: {"ops":..,"seed":..,"bytes_written":..,"bytes_checked":..,
// "seconds":..,"counts":{"write":..,...}}.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "targets.h"

namespace ff::fs3::fsx {

int Main(int argc, char** argv) {
  CLI::App app("Seeded file-system exerciser: random operations checked against a shadow copy",
               "fs3-fsx");
  Options o;
  std::string dir, other, prefix, meta, mgmtd;
  bool native = false, no_mmap = false, no_copy = false, no_truncate = false;
  app.add_option("dir", dir, "Folder the files are made in (a path in fs3 with --native)")
      ->required();
  app.add_option("--seed", o.seed, "Seed of the operation sequence")->capture_default_str();
  app.add_option("--ops", o.ops, "Operations to run")->capture_default_str();
  app.add_option("--files", o.files, "Files worked on at once")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--max-size", o.max_size, "Longest a file gets (bytes; 4MiB etc. accepted)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("--max-len", o.max_len, "Most bytes one operation moves")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("--check-every", o.check_every,
                 "Read every file whole each N operations (0: at the end)")
      ->capture_default_str();
  app.add_option("--other", other,
                 "Another mount of the same file system: read there after close/fsync");
  app.add_option("--prefix", prefix, "File names: PREFIX.0, PREFIX.1, ... (default fsx.SEED)");
  app.add_flag("--no-mmap", no_mmap, "No mmap writes or reads");
  app.add_flag("--no-copy-range", no_copy, "No copy_file_range");
  app.add_flag("--no-truncate", no_truncate, "No truncates");
  app.add_flag("--native", native, "Use fs3's native client (fs3/fs.h) instead of a mount");
  app.add_option("--meta", meta, "fs3-meta host:port (--native)");
  app.add_option("--mgmtd", mgmtd, "fs3-mgmtd host:port (--native)");
  app.add_flag("-v,--verbose", o.verbose, "Print every operation as it runs");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 64;
  }
  o.mmap = !no_mmap;
  o.copy_range = !no_copy;
  o.truncate = !no_truncate;
  o.read_other = !other.empty();
  if (prefix.empty()) prefix = "fsx." + std::to_string(o.seed);
  // The replay command: the same arguments (the sequence depends on nothing else).
  for (int i = 0; i < argc; ++i)
    o.replay += (i ? " " : "") + std::string(argv[i]);

  std::unique_ptr<Target> target;
  if (native) {
    if (meta.empty() || mgmtd.empty()) {
      std::fprintf(stderr, "fs3-fsx: --native needs --meta and --mgmtd\n");
      return 64;
    }
    auto fs = FileSystem::Connect({.meta = meta, .mgmtd = mgmtd, .caller = {0, 0, {}}});
    if (!fs.ok()) {
      std::fprintf(stderr, "fs3-fsx: %s\n", fs.status().ToString().c_str());
      return 1;
    }
    target = std::make_unique<NativeTarget>(std::move(*fs), dir, prefix, o.files);
  } else {
    target = std::make_unique<PosixTarget>(dir, other, prefix, o.files);
  }
  const auto start = std::chrono::steady_clock::now();
  auto summary = Run(o, *target);
  if (!summary.ok()) {
    if (summary.status().code() != StatusCode::kDataLoss) {
      std::fprintf(stderr, "fs3-fsx: %s\nfs3-fsx: replay: %s\n",
                   summary.status().ToString().c_str(), o.replay.c_str());
    }
    return 1;
  }
  nlohmann::json counts;
  for (int k = 0; k <= static_cast<int>(OpKind::kCheckAll); ++k)
    counts[Name(static_cast<OpKind>(k))] = summary->counts[k];
  nlohmann::json out = {
      {"ops", summary->ops},
      {"seed", o.seed},
      {"bytes_written", summary->bytes_written},
      {"bytes_checked", summary->bytes_checked},
      {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()},
      {"counts", counts}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace ff::fs3::fsx

int main(int argc, char** argv) {
  return ff::fs3::fsx::Main(argc, argv);
}
