//===- EmbedTactics.cpp - Tactic choices written into a package --------------===//
//
// dlc tune --embed (pkg::embedTactics): a copy of a package whose metadata also holds
// tactic choices for one GPU key, its sections unchanged.
//===----------------------------------------------------------------------===//
#include "dlc/package/Package.h"

#include <cstring>

namespace dlc::pkg {

namespace {

/// The width of an inline scalar field (0: not a scalar).
size_t scalarWidth(unsigned baseType) {
  switch (baseType) {
  case flatbuffers::ET_UTYPE:
  case flatbuffers::ET_BOOL:
  case flatbuffers::ET_CHAR:
  case flatbuffers::ET_UCHAR:
    return 1;
  case flatbuffers::ET_SHORT:
  case flatbuffers::ET_USHORT:
    return 2;
  case flatbuffers::ET_INT:
  case flatbuffers::ET_UINT:
  case flatbuffers::ET_FLOAT:
    return 4;
  case flatbuffers::ET_LONG:
  case flatbuffers::ET_ULONG:
  case flatbuffers::ET_DOUBLE:
    return 8;
  default:
    return 0;
  }
}

} // namespace

Result<PackageImage> embedTactics(const PackageFile &pf, const std::string &key,
                                  const std::vector<TacticPick> &picks, const HostKey *hostKey) {
  const Package &old = pf.meta();
  const Section *sig = old.host_signature();
  const bool isSigned = sig && sig->size() != 0;
  if (isSigned && !(hostKey && pf.signedWith(*hostKey)))
    return Status(StatusCode::InvalidArgument,
                  pf.name() + " carries host code signed by another user's key: embedding would "
                              "void that signature (keep the choices in the tactics cache, or "
                              "compile the package yourself)");
  const uint8_t *meta = pf.data() + kHeaderSize;
  const uint64_t metaSize = pf.metadataBytes(), sectionsSize = pf.sectionsBytes();
  if (metaSize % 8)
    return Status(StatusCode::InvalidPackage, pf.name() + ": metadata of an unexpected size");

  // The new metadata is the old buffer, whole, with a new root table in front of it
  // that refers to the old one's objects (FlatBuffers' offsets point forward, so a
  // table before them can share them) and to the new embedded_tactics vector. The
  // fields are copied by the schema's type table: a field added to Package later is
  // kept without a change here.
  PackageWriter w;
  flatbuffers::FlatBufferBuilder &fbb = w.builder();
  fbb.Align(16);
  fbb.PushBytes(meta, metaSize);
  const flatbuffers::uoffset_t end = fbb.GetSize();
  auto offsetOf = [&](const uint8_t *p) {
    return static_cast<flatbuffers::uoffset_t>(end - static_cast<uint64_t>(p - meta));
  };

  // The embedded sets: the others' tables as they are, then this key's.
  std::vector<flatbuffers::Offset<EmbeddedTactics>> sets;
  if (old.embedded_tactics())
    for (const EmbeddedTactics *e : *old.embedded_tactics())
      if (!e->key() || e->key()->str() != key)
        sets.push_back(
            flatbuffers::Offset<EmbeddedTactics>(offsetOf(reinterpret_cast<const uint8_t *>(e))));
  sets.push_back(
      CreateEmbeddedTactics(fbb, fbb.CreateString(key), fbb.CreateVectorOfStructs(picks)));
  auto setsVec = fbb.CreateVector(sets);

  const flatbuffers::TypeTable *tt = PackageTypeTable();
  const flatbuffers::Table &root = *reinterpret_cast<const flatbuffers::Table *>(&old);
  const flatbuffers::voffset_t tacticsField = Package::VT_EMBEDDED_TACTICS;
  const flatbuffers::uoffset_t start = fbb.StartTable();
  for (size_t i = 0; i < tt->num_elems; ++i) {
    const auto field = static_cast<flatbuffers::voffset_t>(
        flatbuffers::FieldIndexToOffset(static_cast<flatbuffers::voffset_t>(i)));
    const uint8_t *f = root.GetAddressOf(field);
    if (field == tacticsField || !f)
      continue;
    const flatbuffers::TypeCode tc = tt->type_codes[i];
    const flatbuffers::TypeTable *ref =
        tc.sequence_ref >= 0 ? tt->type_refs[tc.sequence_ref]() : nullptr;
    const bool isStruct =
        tc.base_type == flatbuffers::ET_SEQUENCE && ref && ref->st == flatbuffers::ST_STRUCT;
    if (tc.is_repeating || tc.base_type == flatbuffers::ET_STRING ||
        (tc.base_type == flatbuffers::ET_SEQUENCE && !isStruct)) {
      fbb.AddOffset(field, flatbuffers::Offset<void>(
                               offsetOf(f + flatbuffers::ReadScalar<flatbuffers::uoffset_t>(f))));
      continue;
    }
    const size_t n =
        isStruct ? static_cast<size_t>(ref->values[ref->num_elems]) : scalarWidth(tc.base_type);
    if (n == 0)
      return Status(StatusCode::Internal, "embedTactics: an unknown field type in Package");
    fbb.Align(n % 8 == 0 ? 8 : n % 4 == 0 ? 4 : n % 2 == 0 ? 2 : 1);
    fbb.PushBytes(f, n);
    fbb.TrackField(field, fbb.GetSize());
  }
  fbb.AddOffset(tacticsField, setsVec);
  const flatbuffers::Offset<Package> newRoot(fbb.EndTable(start));

  // The sections as they are: everything before the signature, then the signature
  // (recomputed), at the same offsets.
  const uint8_t *sections = pf.data() + (pf.size() - sectionsSize);
  if (isSigned) {
    w.addSection(sections, sig->offset());
    w.reserveSignature();
  } else if (sectionsSize) {
    w.addSection(sections, sectionsSize);
  }
  return w.finishImage(newRoot, isSigned ? hostKey : nullptr);
}

} // namespace dlc::pkg
