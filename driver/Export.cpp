//===- Export.cpp - The trained model as ONNX -------------------------------===//
#include "dlc/driver/Export.h"

#include "dlc/driver/Tensors.h"
#include "dlc/frontend/OnnxImporter.h"

namespace dlc::driver {

llvm::Expected<ExportResult> exportOnnx(const pkg::PackageFile &pf,
                                        const std::map<std::string, rt::HostTensor> &values,
                                        const std::string &source) {
  const pkg::Package &m = pf.meta();
  if (!m.source_model() || m.source_model()->size() == 0)
    return ir::errorf("'{0}' holds no source model (only training packages compiled from ONNX do)",
                      pf.name());
  std::map<std::string, ir::Tensor> tensors;
  for (const pkg::Variable *v : *m.variables()) {
    std::string name = v->name()->str();
    auto it = values.find(name);
    if (it == values.end())
      return ir::errorf("{0} has no value for the variable '{1}'", source, name);
    auto t = irTensor(it->second, "the value of '" + name + "' in " + source);
    if (!t)
      return t.takeError();
    tensors.emplace(name, std::move(*t));
  }
  const auto *src = m.source_model();
  ExportResult r;
  auto bytes = frontend::replaceInitializers(
      llvm::StringRef(reinterpret_cast<const char *>(pf.section(src)), src->size()), tensors,
      &r.replaced);
  if (!bytes)
    return bytes.takeError();
  r.model = std::move(*bytes);
  return r;
}

} // namespace dlc::driver
