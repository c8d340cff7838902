// fs3-meta's methods on the frame transport (common/frame_rpc.h), in one list that both sides
// expand: the server registers each (MetaService::Start), the client calls each (MetaClient).
// A method's number is its identity on the wire: never renumber one, only add.
// Fsck stays on gRPC only (an administrator's long call).
#pragma once

#define FS3_META_FRAME_METHODS(X)               \
  X(1, Lookup, NameRequest, Inode)              \
  X(2, GetAttr, InoRequest, Inode)              \
  X(3, Make, MakeRequest, Inode)                \
  X(4, Link, LinkRequest, Inode)                \
  X(5, Readlink, InoRequest, XattrReply)        \
  X(6, Unlink, NameRequest, DirsReply)          \
  X(7, Rmdir, NameRequest, DirsReply)           \
  X(8, Rename, RenameRequest, DirsReply)        \
  X(9, Readdir, ReaddirRequest, ReaddirReply)   \
  X(10, SetAttr, SetAttrRequest, Inode)         \
  X(11, SetXattr, XattrRequest, Empty)          \
  X(12, GetXattr, XattrRequest, XattrReply)     \
  X(13, ListXattrs, InoRequest, XattrReply)     \
  X(14, RemoveXattr, XattrRequest, Empty)       \
  X(15, Open, InoRequest, Inode)                \
  X(16, Close, CloseRequest, Empty)             \
  X(17, Sync, CloseRequest, Inode)              \
  X(18, Statfs, Empty, StatfsReply)             \
  X(19, SetLayout, SetLayoutRequest, Inode)     \
  X(20, KeepClient, ClientRequest, ClientReply) \
  X(21, CloseMany, CloseBatch, Empty)
