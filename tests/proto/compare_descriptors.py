#!/usr/bin/python3
"""Check that our CRI proto defines exactly what upstream's does.

Both files are compiled with `protoc --descriptor_set_out --include_imports`
and the resulting descriptors are compared definition by definition.

Rule: the two define exactly the same things: package, services, methods
(input/output types, client/server streaming), messages (nested ones too),
fields (name, number, label, type, type_name, oneof, json_name, proto3
optional, packed, deprecated), map entries, enums and their values.
Ours may not add anything either: a field number upstream does not use
today may be given another meaning by upstream tomorrow (as ExecRequest's
field 7 was), and the two would then clash on the wire.

Every difference is printed on its own line as

    <full name>: <what> <upstream value> != <our value>
    <full name>: missing
    <full name>: not in upstream

e.g. `runtime.v1.ContainerConfig.linux: number 15 != 14`.

Exit status: 0 when identical, 1 on any difference, 2 when a file
cannot be compiled or read.

Usage: compare_descriptors.py [--protoc PROTOC] UPSTREAM OURS

Needs Debian's python3-protobuf, so run it with /usr/bin/python3.
"""

import argparse
import os
import subprocess
import sys
import tempfile

from google.protobuf import descriptor_pb2

FDP = descriptor_pb2.FieldDescriptorProto


class CompileError(Exception):
    pass


def compile_proto(protoc, path):
    """Return the FileDescriptorProto of `path` (compiled with its imports)."""
    path = os.path.abspath(path)
    incdir, name = os.path.split(path)
    with tempfile.TemporaryDirectory(prefix="kinglet-desc-") as tmp:
        out = os.path.join(tmp, "set.pb")
        cmd = [protoc, "-I" + incdir, "--include_imports",
               "--descriptor_set_out=" + out, name]
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        except OSError as e:
            raise CompileError("cannot run %s: %s" % (protoc, e))
        if proc.returncode != 0:
            raise CompileError("protoc failed on %s:\n%s"
                               % (path, proc.stderr.strip()))
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
    for fd in fds.file:
        if fd.name == name:
            return fd
    raise CompileError("%s: not in its own descriptor set" % path)


def label_name(v):
    return FDP.Label.Name(v)


def type_name(v):
    return FDP.Type.Name(v)


class Comparer:
    def __init__(self):
        self.diffs = []
        self.counts = {"messages": 0, "fields": 0, "enums": 0,
                       "values": 0, "methods": 0}

    def diff(self, where, what, up, ours):
        self.diffs.append("%s: %s %s != %s" % (where, what, up, ours))

    def missing(self, where):
        self.diffs.append("%s: missing" % where)

    def extra(self, where):
        self.diffs.append("%s: not in upstream" % where)

    def by_name(self, items):
        return {i.name: i for i in items}

    def extras(self, prefix, up_items, our_items):
        names = set(i.name for i in up_items)
        for i in our_items:
            if i.name not in names:
                self.extra("%s.%s" % (prefix, i.name))

    def file(self, up, ours):
        if up.package != ours.package:
            self.diff("package", "name", up.package, ours.package)
        if (up.syntax or "proto2") != (ours.syntax or "proto2"):
            self.diff("syntax", "value", up.syntax or "proto2",
                      ours.syntax or "proto2")
        prefix = ours.package or up.package
        self.services(prefix, up.service, ours.service)
        self.messages(prefix, up.message_type, ours.message_type)
        self.enums(prefix, up.enum_type, ours.enum_type)

    def services(self, prefix, up_list, our_list):
        ours = self.by_name(our_list)
        for us in up_list:
            where = "%s.%s" % (prefix, us.name)
            os_ = ours.get(us.name)
            if os_ is None:
                self.missing(where)
                continue
            om = self.by_name(os_.method)
            for m in us.method:
                self.counts["methods"] += 1
                mw = "%s.%s" % (where, m.name)
                o = om.get(m.name)
                if o is None:
                    self.missing(mw)
                    continue
                for attr in ("input_type", "output_type",
                             "client_streaming", "server_streaming"):
                    a, b = getattr(m, attr), getattr(o, attr)
                    if a != b:
                        self.diff(mw, attr, a, b)
            self.extras(where, us.method, os_.method)
        self.extras(prefix, up_list, our_list)

    def messages(self, prefix, up_list, our_list):
        ours = self.by_name(our_list)
        for um in up_list:
            self.counts["messages"] += 1
            where = "%s.%s" % (prefix, um.name)
            om = ours.get(um.name)
            if om is None:
                self.missing(where)
                continue
            ume = um.options.map_entry
            ome = om.options.map_entry
            if ume != ome:
                self.diff(where, "map_entry", ume, ome)
            self.fields(where, um, om)
            self.messages(where, um.nested_type, om.nested_type)
            self.enums(where, um.enum_type, om.enum_type)
        self.extras(prefix, up_list, our_list)

    def fields(self, where, um, om):
        ours = self.by_name(om.field)
        for uf in um.field:
            self.counts["fields"] += 1
            fw = "%s.%s" % (where, uf.name)
            of = ours.get(uf.name)
            if of is None:
                self.missing(fw)
                continue
            if uf.number != of.number:
                self.diff(fw, "number", uf.number, of.number)
            if uf.label != of.label:
                self.diff(fw, "label", label_name(uf.label),
                          label_name(of.label))
            if uf.type != of.type:
                self.diff(fw, "type", type_name(uf.type), type_name(of.type))
            if uf.type_name != of.type_name:
                self.diff(fw, "type_name", uf.type_name or "-",
                          of.type_name or "-")
            if uf.json_name != of.json_name:
                self.diff(fw, "json_name", uf.json_name, of.json_name)
            if uf.proto3_optional != of.proto3_optional:
                self.diff(fw, "proto3_optional", uf.proto3_optional,
                          of.proto3_optional)
            if uf.extendee != of.extendee:
                self.diff(fw, "extendee", uf.extendee or "-",
                          of.extendee or "-")
            # packed changes the encoding of repeated scalars.
            up_, op_ = self.packed(uf), self.packed(of)
            if up_ != op_:
                self.diff(fw, "packed", up_, op_)
            if uf.options.deprecated != of.options.deprecated:
                self.diff(fw, "deprecated", uf.options.deprecated,
                          of.options.deprecated)
            uo = self.oneof(um, uf)
            oo = self.oneof(om, of)
            if uo != oo:
                self.diff(fw, "oneof", uo, oo)
        self.extras(where, um.field, om.field)

    @staticmethod
    def packed(field):
        """Explicit [packed=...] option, or "default"."""
        if field.options.HasField("packed"):
            return field.options.packed
        return "default"

    @staticmethod
    def oneof(msg, field):
        """Oneof of a field as "index:name", or "-" when it has none."""
        if not field.HasField("oneof_index"):
            return "-"
        i = field.oneof_index
        name = msg.oneof_decl[i].name if i < len(msg.oneof_decl) else "?"
        return "%d:%s" % (i, name)

    def enums(self, prefix, up_list, our_list):
        ours = self.by_name(our_list)
        for ue in up_list:
            self.counts["enums"] += 1
            where = "%s.%s" % (prefix, ue.name)
            oe = ours.get(ue.name)
            if oe is None:
                self.missing(where)
                continue
            ov = self.by_name(oe.value)
            for v in ue.value:
                self.counts["values"] += 1
                vw = "%s.%s" % (where, v.name)
                o = ov.get(v.name)
                if o is None:
                    self.missing(vw)
                elif v.number != o.number:
                    self.diff(vw, "number", v.number, o.number)
            self.extras(where, ue.value, oe.value)
        self.extras(prefix, up_list, our_list)


def main(argv):
    ap = argparse.ArgumentParser(
        description="Compare our CRI proto with upstream's, field by field.")
    ap.add_argument("--protoc", default="protoc",
                    help="protoc to use (default: protoc on PATH)")
    ap.add_argument("upstream", help="upstream api.proto")
    ap.add_argument("ours", help="our api.proto")
    args = ap.parse_args(argv)

    try:
        up = compile_proto(args.protoc, args.upstream)
        ours = compile_proto(args.protoc, args.ours)
    except CompileError as e:
        print("compare_descriptors: %s" % e, file=sys.stderr)
        return 2

    c = Comparer()
    c.file(up, ours)
    for line in c.diffs:
        print(line)
    if c.diffs:
        print("compare_descriptors: %d difference(s) between %s and %s"
              % (len(c.diffs), args.upstream, args.ours), file=sys.stderr)
        return 1
    print("identical: %(messages)d messages, %(fields)d fields, "
          "%(enums)d enums, %(values)d values, %(methods)d methods"
          % c.counts)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
