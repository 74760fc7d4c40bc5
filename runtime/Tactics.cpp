//===- Tactics.cpp - Choosing each layer's implementation on the user's GPU ---===//
//
// A layer with tactics (pkg::Step::tactic) carries several implementations: our
// kernels, and cuDNN's where it runs the layer. When a session starts on a GPU it
// times each one (a warm-up, then the mean of a few runs on the session's stream and
// buffers, within a total budget) and keeps the fastest; the choices go to the
// tactics cache, keyed by the package's bytes and by the GPU, driver and library
// versions, so that later sessions time nothing. Emu runs our kernels unless vendor
// tactics are forced (its host cuDNN convolution tests their schedules).
//
// Cache file: <dir>/<crc32>-<size>-<crc32 of the key>.txt, "dlc-tactics 1", "key <backend
// key>", then one "<schedule> <group> <alt> <microseconds>" line per layer. A file that
// is corrupt or holds another key is ignored (with a note) and rewritten.
//===----------------------------------------------------------------------===//
#include "Backend.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sys/stat.h>
#include <unistd.h>

namespace dlc::rt {

namespace {

using Clock = std::chrono::steady_clock;

SessionOptions::Tactics tacticsMode(SessionOptions::Tactics opt, std::string &note) {
  if (opt != SessionOptions::Tactics::Default)
    return opt;
  const char *e = std::getenv("DLC_TACTICS");
  if (!e || !*e)
    return SessionOptions::Tactics::Auto;
  std::string v = e;
  if (v == "auto")
    return SessionOptions::Tactics::Auto;
  if (v == "dlc")
    return SessionOptions::Tactics::Dlc;
  if (v == "vendor")
    return SessionOptions::Tactics::Vendor;
  note = "DLC_TACTICS='" + v + "' is not auto, dlc or vendor: ignored";
  return SessionOptions::Tactics::Auto;
}

std::string cacheDirectory(const std::string &opt) {
  if (opt == "-")
    return "";
  if (!opt.empty())
    return opt;
  if (const char *d = std::getenv("DLC_CACHE_DIR"); d && *d)
    return std::string(d) + "/tactics";
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/dlc/tactics";
  if (const char *h = std::getenv("HOME"); h && *h)
    return std::string(h) + "/.cache/dlc/tactics";
  return "";
}

using CacheEntries = decltype(TacticsCache::choices);

/// One line of `f` without its newline: 1, or 0 at the end, or -1 for a line longer
/// than any of ours.
int readLine(FILE *f, std::string &line) {
  line.clear();
  for (int c; (c = std::fgetc(f)) != EOF;) {
    if (c == '\n')
      return 1;
    if (line.size() > 4096)
      return -1;
    line += static_cast<char>(c);
  }
  return line.empty() ? 0 : 1;
}

/// Creates `dir` and its parents (mkdir -p); existing ones are fine.
void makeDirectories(const std::string &dir) {
  for (size_t i = 1; i <= dir.size(); ++i)
    if (i == dir.size() || dir[i] == '/')
      ::mkdir(dir.substr(0, i).c_str(), 0755);
}

/// Writes the cache file atomically (a temporary renamed over it); false on failure.
bool writeCache(const std::string &path, const std::string &key, const CacheEntries &entries) {
  makeDirectories(path.substr(0, path.rfind('/')));
  // (Sessions of one package may be created at once, in threads and processes.)
  static std::atomic<unsigned> serial{0};
  const std::string tmp =
      path + ".tmp" + std::to_string(::getpid()) + "." + std::to_string(serial.fetch_add(1));
  FILE *f = std::fopen(tmp.c_str(), "w");
  if (!f)
    return false;
  bool ok = std::fprintf(f, "dlc-tactics 1\nkey %s\n", key.c_str()) > 0;
  for (const auto &[where, choice] : entries)
    ok &= std::fprintf(f, "%zu %u %u %.3f\n", where.first, where.second, unsigned(choice.first),
                       choice.second) > 0;
  ok &= std::fclose(f) == 0;
  if (ok && std::rename(tmp.c_str(), path.c_str()) == 0)
    return true;
  std::remove(tmp.c_str());
  return false;
}

} // namespace

Result<TacticsCache> readTacticsCache(const std::string &path) {
  FILE *f = std::fopen(path.c_str(), "r");
  if (!f)
    return Status(StatusCode::IoError, "no tactics cache " + path);
  TacticsCache c;
  std::string line, why;
  if (readLine(f, line) != 1 || line != "dlc-tactics 1")
    why = "is not a tactics cache";
  else if (readLine(f, line) != 1 || line.rfind("key ", 0) != 0)
    why = "is damaged";
  else
    c.key = line.substr(4);
  for (int got; why.empty() && (got = readLine(f, line)) != 0;) {
    if (got < 0) {
      why = "is damaged";
      break;
    }
    unsigned long long schedule = 0;
    unsigned group = 0, alt = 0;
    double us = 0;
    char rest = 0;
    if (std::sscanf(line.c_str(), "%llu %u %u %lf %c", &schedule, &group, &alt, &us, &rest) != 4 ||
        alt < 1 || alt > static_cast<unsigned>(pkg::kMaxTactics) || !(us >= 0))
      why = "is damaged";
    else
      c.choices[{static_cast<size_t>(schedule), group}] = {static_cast<uint8_t>(alt), us};
  }
  std::fclose(f);
  if (!why.empty())
    return Status(StatusCode::InvalidArgument, "tactics cache " + path + " " + why);
  return c;
}

std::string tacticsCacheFileName(const pkg::PackageFile &p, const std::string &key) {
  char name[64];
  std::snprintf(name, sizeof name, "%08x-%zx-%08x.txt", pkg::crc32(p.data(), p.size()), p.size(),
                pkg::crc32(key.data(), key.size()));
  return name;
}

Result<pkg::PackageImage> embedChosenTactics(const Session &s, const pkg::PackageFile &pf) {
  const std::string key = s.tacticsKey();
  if (key.empty())
    return Status(StatusCode::Unavailable,
                  "tactics are embedded for a GPU: this session runs on " + s.backendDescription());
  std::vector<pkg::TacticPick> picks;
  for (const TacticChoice &c : s.tactics())
    if ((c.how == "timed" || c.how == "cache" || c.how == "package") &&
        c.chosen < c.candidates.size())
      picks.emplace_back(static_cast<uint32_t>(c.schedule), c.group, c.candidates[c.chosen].alt,
                         static_cast<float>(std::max(c.candidates[c.chosen].micros, 0.0)));
  if (picks.empty())
    return Status(StatusCode::Unavailable,
                  "no tactic was measured on this GPU (forced, or the tuning budget ran out "
                  "first): nothing to embed");
  auto hostKey = loadHostKey(/*create=*/false);
  return pkg::embedTactics(pf, key, picks, hostKey.ok() ? &*hostKey : nullptr);
}

std::string Session::tacticsKey() const {
  return backend_->tacticKey();
}

Status Session::chooseTactics(size_t k) {
  Schedule &sc = schedules_[k];
  sc.tacticsChosen = true;
  std::vector<pkg::TacticGroup> groups = pkg::tacticGroups(sc.all, arch_);
  if (groups.empty())
    return Status::ok();
  std::string modeNote;
  const SessionOptions::Tactics mode = tacticsMode(opts_.tactics, modeNote);
  if (!modeNote.empty())
    scheduleNotes_.push_back(modeNote);
  const bool forcedDlc = mode == SessionOptions::Tactics::Dlc;
  // Which candidates run here (forced to ours: no vendor library is even loaded), then
  // the key, the same for every schedule of the session.
  std::vector<std::vector<bool>> runs(groups.size());
  std::vector<TacticChoice> choices(groups.size());
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    TacticChoice &c = choices[gi];
    c.schedule = k;
    c.group = groups[gi].group;
    c.node = groups[gi].node;
    for (const pkg::TacticAlt &a : groups[gi].alts) {
      TacticChoice::Candidate cand;
      cand.kind = pkg::tacticKindName(a.kind);
      cand.description = a.desc;
      cand.alt = a.alt;
      std::string why;
      runs[gi].push_back(a.kind == pkg::TacticKind::Dlc ||
                         (!forcedDlc && backend_->runsTactic(a.kind, why)));
      if (!runs[gi].back())
        cand.problem = forcedDlc ? "" : why.empty() ? "not supported here" : why;
      c.candidates.push_back(cand);
    }
  }
  const std::string key = forcedDlc ? "" : backend_->tacticKey();
  const bool onGpu = !key.empty(), timing = mode == SessionOptions::Tactics::Auto && onGpu;
  // The cache: read when timing, so that a hit times nothing.
  std::string path, cacheProblem;
  CacheEntries cache, embedded;
  if (timing) {
    // (The package's checksum once per session: a shape variant's choice reuses it.)
    if (tacticsCachePath_.empty())
      if (std::string dir = cacheDirectory(opts_.tacticsCacheDir); !dir.empty())
        tacticsCachePath_ = dir + "/" + tacticsCacheFileName(*pkg_, key);
    if (!tacticsCachePath_.empty()) {
      path = tacticsCachePath_;
      auto read = readTacticsCache(path);
      if (read && read->key == key)
        cache = std::move(read->choices);
      else if (read)
        cacheProblem = "was written for another GPU or library version (" + read->key + ")";
      else if (read.status().code() != StatusCode::IoError)
        cacheProblem = read.status().message().substr(("tactics cache " + path + " ").size());
      if (!cacheProblem.empty())
        scheduleNotes_.push_back("tactics cache " + path + " " + cacheProblem +
                                 ": ignored, timing again");
    }
    // Choices embedded in the package for this GPU (dlc tune --embed), where the cache
    // has none.
    if (const auto *sets = opts_.useEmbeddedTactics ? pkg_->meta().embedded_tactics() : nullptr)
      for (const pkg::EmbeddedTactics *e : *sets)
        if (e->key() && e->key()->str() == key && e->picks())
          for (const pkg::TacticPick *p : *e->picks())
            if (p->schedule() == k && !cache.count({k, p->group()}) && p->alt() >= 1 &&
                p->alt() <= pkg::kMaxTactics)
              embedded[{k, p->group()}] = {p->alt(), std::max(0.0, double(p->micros()))};
  }
  const auto t0 = Clock::now();
  const double budget = std::max(opts_.tuneBudgetMs, 0.0);
  size_t timed = 0, fromCache = 0, fromPackage = 0, overBudget = 0;
  bool rewrite = false; // a cached choice failed: the file loses it
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const pkg::TacticGroup &g = groups[gi];
    TacticChoice &c = choices[gi];
    auto indexOf = [&](uint8_t alt) {
      for (size_t i = 0; i < g.alts.size(); ++i)
        if (g.alts[i].alt == alt)
          return i;
      return g.alts.size();
    };
    const size_t fallback = indexOf(g.defaultAlt());
    size_t chosen = fallback;
    // Issues alternative i's steps in schedule order (also those on one side of an If
    // with a run-time condition: they write only the layer's own outputs).
    auto issueAlt = [&](size_t i) -> Status {
      for (const pkg::Step *st : *sc.all)
        if (st->alt_group() == g.group && st->alt() == g.alts[i].alt &&
            pkg::stepRunsOn(*st, arch_)) {
          const char *kind = "";
          DLC_RETURN_IF_ERROR(issueStep(*st, false, kind));
        }
      return Status::ok();
    };
    auto it = cache.find({k, g.group});
    const bool inPackage = it == cache.end() && embedded.count({k, g.group});
    if (inPackage)
      it = embedded.find({k, g.group});
    if (forcedDlc) {
      c.how = "forced";
    } else if (mode == SessionOptions::Tactics::Vendor) {
      c.how = "forced";
      for (size_t i = 0; i < g.alts.size(); ++i)
        if (g.alts[i].kind != pkg::TacticKind::Dlc && runs[gi][i]) {
          // On a GPU the vendor's call is tried once: where it cannot run this layer,
          // our kernels do.
          double us = 0;
          Status st =
              onGpu ? backend_->timeIssue([&] { return issueAlt(i); }, 1, us) : Status::ok();
          if (st) {
            c.candidates[i].problem = st.message();
            continue;
          }
          chosen = i;
          break;
        }
    } else if (!timing) {
      c.how = "default";
    } else if ((inPackage || it != cache.end()) && indexOf(it->second.first) < g.alts.size() &&
               runs[gi][indexOf(it->second.first)]) {
      c.how = inPackage ? "package" : "cache";
      chosen = indexOf(it->second.first);
      c.candidates[chosen].micros = it->second.second;
      ++(inPackage ? fromPackage : fromCache);
    } else if (std::chrono::duration<double, std::milli>(Clock::now() - t0).count() > budget) {
      c.how = "default";
      ++overBudget;
    } else {
      c.how = "timed";
      double best = -1;
      for (size_t i = 0; i < g.alts.size(); ++i) {
        if (!runs[gi][i])
          continue;
        double us = 0;
        if (Status st = backend_->timeIssue([&] { return issueAlt(i); }, 5, us)) {
          c.candidates[i].problem = st.message();
          continue;
        }
        c.candidates[i].micros = us;
        if (best < 0 || us < best)
          best = us, chosen = i;
      }
      if (best >= 0) {
        cache[{k, g.group}] = {g.alts[chosen].alt, best};
        ++timed;
      } else {
        c.how = "default"; // no candidate ran: ours, untimed
      }
    }
    // A vendor choice read from the cache or the package runs once here, outside any
    // CUDA graph capture (its plan is built now); where it fails, our kernels run.
    if ((c.how == "cache" || c.how == "package") && g.alts[chosen].kind != pkg::TacticKind::Dlc) {
      Status st = issueAlt(chosen);
      if (!st)
        st = backend_->synchronize();
      if (st) {
        c.candidates[chosen].problem = st.message();
        scheduleNotes_.push_back("tactics: '" + g.node + "' runs our kernels: its " +
                                 (c.how == "cache" ? "cached " : "embedded ") +
                                 c.candidates[chosen].kind + " choice failed (" + st.message() +
                                 ")");
        chosen = fallback;
        rewrite |= c.how == "cache";
        --(c.how == "cache" ? fromCache : fromPackage);
        c.how = "default";
        cache.erase({k, g.group});
      }
    }
    c.chosen = chosen;
    sc.chosen[g.group] = g.alts[chosen].alt;
  }
  for (TacticChoice &c : choices)
    tactics_.push_back(std::move(c));
  // (Timing wrote only the layers' own outputs and temporaries: no input or variable.)
  if (timed || (mode == SessionOptions::Tactics::Vendor && onGpu))
    DLC_RETURN_IF_ERROR(backend_->synchronize());
  if (rewrite && !timed && !path.empty())
    writeCache(path, key, cache);
  if (timed) {
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::string where = path.empty() ? "no cache"
                        : writeCache(path, key, cache)
                            ? "cached in " + path
                            : "the cache " + path + " could not be written";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.0f ms", ms);
    scheduleNotes_.push_back("tactics: timed " + std::to_string(timed) + " layer" +
                             (timed == 1 ? "" : "s") + " in " + buf + " (" + where + ")");
  }
  if (fromCache)
    scheduleNotes_.push_back("tactics: " + std::to_string(fromCache) + " layer" +
                             (fromCache == 1 ? "" : "s") + " from the cache " + path);
  if (fromPackage)
    scheduleNotes_.push_back("tactics: " + std::to_string(fromPackage) + " layer" +
                             (fromPackage == 1 ? "" : "s") +
                             " from the choices embedded in the package (dlc tune --embed)");
  if (overBudget)
    scheduleNotes_.push_back("tactics: " + std::to_string(overBudget) + " layer" +
                             (overBudget == 1 ? "" : "s") +
                             " run our kernels untimed: the tuning budget of " +
                             std::to_string(static_cast<long>(budget)) + " ms ran out");
  buildSteps(sc);
  return Status::ok();
}

} // namespace dlc::rt
