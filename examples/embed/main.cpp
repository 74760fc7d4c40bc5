// embed: runs a compiled .dlc package from an application, through the dlc runtime's
// C++ wrapper (<dlc/runtime.hpp>, over the C API in <dlc/runtime.h>).
//
//   embed MODEL.dlc INPUT.npy [--sessions N]
//
// Loads the model once, then runs it from N threads at once, each with its own session
// (sessions of one model share its weights), checks that all agree, and prints every
// output of the first session. Inputs are .npy files of the model's first input
// (float32, C order).
#include <cstdio>
#include <cstring>
#include <dlc/runtime.hpp>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace {

/// A minimal .npy reader: little-endian float32, C order, any shape.
std::vector<float> readNpyF32(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0)
    throw std::runtime_error(path + ": not a .npy file");
  size_t headerLen = bytes[6] == 1 ? (unsigned char)bytes[8] | ((unsigned char)bytes[9] << 8) : 0;
  size_t start = 10;
  if (bytes[6] != 1) { // format 2.0: 4-byte header length
    uint32_t n;
    std::memcpy(&n, bytes.data() + 8, 4);
    headerLen = n;
    start = 12;
  }
  std::string header(bytes.data() + start - 2,
                     bytes.data() + std::min(bytes.size(), start + headerLen));
  if (header.find("'<f4'") == std::string::npos ||
      header.find("'fortran_order': False") == std::string::npos)
    throw std::runtime_error(path + ": expected little-endian float32 in C order");
  size_t offset = start + headerLen;
  std::vector<float> v((bytes.size() - offset) / 4);
  std::memcpy(v.data(), bytes.data() + offset, v.size() * 4);
  return v;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.dlc INPUT.npy [--sessions N]\n", argv[0]);
    return 2;
  }
  int sessions = argc >= 5 && std::string(argv[3]) == "--sessions" ? std::atoi(argv[4]) : 2;
  try {
    dlc::Model model = dlc::Model::load(argv[1]);
    std::vector<dlc::TensorInfo> inputs = model.inputs(), outputs = model.outputs();
    std::vector<float> input = readNpyF32(argv[2]);

    // One session per thread; all share the model's weights.
    std::vector<std::vector<std::vector<float>>> results(sessions);
    std::vector<std::string> errors(sessions), devices(sessions);
    std::vector<std::thread> threads;
    for (int t = 0; t < sessions; ++t)
      threads.emplace_back([&, t] {
        try {
          dlc::Session session(model);
          devices[t] = session.device();
          session.setInput(inputs[0].name, input); // checks dtype and size
          session.run();
          for (const dlc::TensorInfo &o : outputs)
            results[t].push_back(session.output<float>(o.name));
        } catch (const std::exception &e) {
          errors[t] = e.what();
        }
      });
    for (std::thread &th : threads)
      th.join();
    for (int t = 0; t < sessions; ++t)
      if (!errors[t].empty()) {
        std::fprintf(stderr, "embed: session %d: %s\n", t, errors[t].c_str());
        return 1;
      }
    for (int t = 1; t < sessions; ++t)
      if (results[t] != results[0]) {
        std::fprintf(stderr, "embed: session %d disagrees with session 0\n", t);
        return 1;
      }
    std::printf("device: %s\nsessions: %d (agree)\n", devices[0].c_str(), sessions);
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::printf("%s:", outputs[i].name.c_str());
      for (float x : results[0][i])
        std::printf(" %.9g", x);
      std::printf("\n");
    }
  } catch (const dlc::Error &e) {
    std::fprintf(stderr, "embed: error: %s (%s)\n", e.what(), dlc_status_string(e.status()));
    return 1;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "embed: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
