"""The M1 task-descriptor field table: every register field ControlDMA can load.

Each row is ``(name, byte_offset, bit, width)``: the field occupies ``width`` bits starting at
bit ``bit`` of the little-endian byte at ``byte_offset`` in the raw 0x274-byte TD.  The facts
come from the recovered M1 bit map (the corpus file ``aneregs.json``, 258 entries); the table
below was generated from it once and is fastane's own source (the package never reads the
corpus).  Canonical names drop the bit map's ``aneTD.``/``aneRegs.`` prefix and the header word
index: ``aneTD.Header[0].NID`` is ``Header.NID``, ``aneRegs.Common.Cin.Cin`` is ``Common.Cin.Cin``.

No field straddles a 32-bit word, so each one is also described by ``(word, shift, mask)``:
``value = (words[word] >> shift) & mask``.  The Planar section (4 words at 0x22c) has no named
fields in the bit map; :data:`PLANAR_WORDS` exposes its raw words as ``Planar.Word[0..3]``.
"""

from __future__ import annotations

from typing import NamedTuple

from ..m1 import TD_SIZE, TD_STRIDE

TD_WORDS = TD_SIZE // 4


class Field(NamedTuple):
    """One TD field: canonical ``name`` = ``section.register.field``, position and width."""

    name: str
    section: str
    register: str
    field: str
    offset: int  # byte offset into the TD of the byte holding the field's bit 0
    bit: int  # bit position inside that byte
    width: int
    word: int  # 32-bit word index (offset // 4)
    shift: int  # bit position inside that word
    mask: int  # (1 << width) - 1

    @property
    def max(self) -> int:
        """Largest value the field can hold."""
        return self.mask


# (canonical name, byte offset, bit, width), in bit-map order.
_TABLE = (
    ("Header.TID", 0x000, 0, 16),
    ("Header.NID", 0x002, 0, 8),
    ("Header.LNID", 0x003, 0, 1),
    ("Header.EON", 0x003, 1, 1),
    ("Header.ExeCycles", 0x004, 0, 16),
    ("Header.NextSize", 0x006, 0, 9),
    ("Header.LogEvents", 0x008, 0, 24),
    ("Header.Exceptions", 0x00C, 0, 24),
    ("Header.DebugLogEvents", 0x010, 0, 24),
    ("Header.DebugExceptions", 0x014, 0, 24),
    ("Header.DisallowAbort", 0x019, 0, 1),
    ("Header.TDSkip", 0x019, 1, 1),
    ("Header.KPC", 0x019, 2, 1),
    ("Header.SPL", 0x019, 3, 1),
    ("Header.TSR", 0x019, 4, 1),
    ("Header.SPC", 0x019, 5, 1),
    ("Header.DPC", 0x019, 6, 1),
    ("Header.TSE", 0x019, 7, 1),
    ("Header.NextPriority", 0x01A, 0, 6),
    ("Header.TDE", 0x01B, 0, 1),
    ("Header.SrcLoc", 0x01B, 4, 1),
    ("Header.DstLoc", 0x01B, 5, 1),
    ("Header.TQDis", 0x01B, 7, 1),
    ("Header.NextPointer", 0x01C, 0, 32),
    ("Header.RBase0", 0x020, 0, 5),
    ("Header.RBE0", 0x020, 5, 1),
    ("Header.RBase1", 0x020, 6, 5),
    ("Header.RBE1", 0x021, 3, 1),
    ("Header.WBase", 0x021, 4, 5),
    ("Header.WBE", 0x022, 1, 1),
    ("Header.TBase", 0x022, 2, 5),
    ("Header.TBE", 0x022, 7, 1),
    ("Header.ENE", 0x023, 0, 3),
    ("Header.KBase0", 0x024, 0, 5),
    ("Header.KBE0", 0x024, 5, 1),
    ("Header.KBase1", 0x024, 6, 5),
    ("Header.KBE1", 0x025, 3, 1),
    ("Header.KBase2", 0x025, 4, 5),
    ("Header.KBE2", 0x026, 1, 1),
    ("Header.KBase3", 0x026, 2, 5),
    ("Header.KBE3", 0x026, 7, 1),
    ("KernelDMASrc.CoeffDMAConfig[0].En", 0x034, 0, 1),
    ("KernelDMASrc.CoeffDMAConfig[0].CrH", 0x034, 4, 2),
    ("KernelDMASrc.CoeffDMAConfig[0].CacheHint", 0x034, 6, 4),
    ("KernelDMASrc.CoeffDMAConfig[0].PrefetchParticipateEn", 0x037, 4, 1),
    ("KernelDMASrc.CoeffDMAConfig[1].En", 0x038, 0, 1),
    ("KernelDMASrc.CoeffDMAConfig[1].CrH", 0x038, 4, 2),
    ("KernelDMASrc.CoeffDMAConfig[1].CacheHint", 0x038, 6, 4),
    ("KernelDMASrc.CoeffDMAConfig[1].PrefetchParticipateEn", 0x03B, 4, 1),
    ("KernelDMASrc.CoeffDMAConfig[2].En", 0x03C, 0, 1),
    ("KernelDMASrc.CoeffDMAConfig[2].CrH", 0x03C, 4, 2),
    ("KernelDMASrc.CoeffDMAConfig[2].CacheHint", 0x03C, 6, 4),
    ("KernelDMASrc.CoeffDMAConfig[2].PrefetchParticipateEn", 0x03F, 4, 1),
    ("KernelDMASrc.CoeffDMAConfig[3].En", 0x040, 0, 1),
    ("KernelDMASrc.CoeffDMAConfig[3].CrH", 0x040, 4, 2),
    ("KernelDMASrc.CoeffDMAConfig[3].CacheHint", 0x040, 6, 4),
    ("KernelDMASrc.CoeffDMAConfig[3].PrefetchParticipateEn", 0x043, 4, 1),
    ("KernelDMASrc.CoeffDMAConfig[4].En", 0x044, 0, 1),
    ("KernelDMASrc.CoeffDMAConfig[4].CrH", 0x044, 4, 2),
    ("KernelDMASrc.CoeffDMAConfig[4].CacheHint", 0x044, 6, 4),
    ("KernelDMASrc.CoeffDMAConfig[4].PrefetchParticipateEn", 0x047, 4, 1),
    ("KernelDMASrc.CoeffDMAConfig[5].En", 0x048, 0, 1),
    ("KernelDMASrc.CoeffDMAConfig[5].CrH", 0x048, 4, 2),
    ("KernelDMASrc.CoeffDMAConfig[5].CacheHint", 0x048, 6, 4),
    ("KernelDMASrc.CoeffDMAConfig[5].PrefetchParticipateEn", 0x04B, 4, 1),
    ("KernelDMASrc.CoeffDMAConfig[6].En", 0x04C, 0, 1),
    ("KernelDMASrc.CoeffDMAConfig[6].CrH", 0x04C, 4, 2),
    ("KernelDMASrc.CoeffDMAConfig[6].CacheHint", 0x04C, 6, 4),
    ("KernelDMASrc.CoeffDMAConfig[6].PrefetchParticipateEn", 0x04F, 4, 1),
    ("KernelDMASrc.CoeffDMAConfig[7].En", 0x050, 0, 1),
    ("KernelDMASrc.CoeffDMAConfig[7].CrH", 0x050, 4, 2),
    ("KernelDMASrc.CoeffDMAConfig[7].CacheHint", 0x050, 6, 4),
    ("KernelDMASrc.CoeffDMAConfig[7].PrefetchParticipateEn", 0x053, 4, 1),
    ("KernelDMASrc.CoeffDMAConfig[8].En", 0x054, 0, 1),
    ("KernelDMASrc.CoeffDMAConfig[8].CrH", 0x054, 4, 2),
    ("KernelDMASrc.CoeffDMAConfig[8].CacheHint", 0x054, 6, 4),
    ("KernelDMASrc.CoeffDMAConfig[8].PrefetchParticipateEn", 0x057, 4, 1),
    ("KernelDMASrc.CoeffDMAConfig[9].En", 0x058, 0, 1),
    ("KernelDMASrc.CoeffDMAConfig[9].CrH", 0x058, 4, 2),
    ("KernelDMASrc.CoeffDMAConfig[9].CacheHint", 0x058, 6, 4),
    ("KernelDMASrc.CoeffDMAConfig[9].PrefetchParticipateEn", 0x05B, 4, 1),
    ("KernelDMASrc.CoeffDMAConfig[10].En", 0x05C, 0, 1),
    ("KernelDMASrc.CoeffDMAConfig[10].CrH", 0x05C, 4, 2),
    ("KernelDMASrc.CoeffDMAConfig[10].CacheHint", 0x05C, 6, 4),
    ("KernelDMASrc.CoeffDMAConfig[10].PrefetchParticipateEn", 0x05F, 4, 1),
    ("KernelDMASrc.CoeffDMAConfig[11].En", 0x060, 0, 1),
    ("KernelDMASrc.CoeffDMAConfig[11].CrH", 0x060, 4, 2),
    ("KernelDMASrc.CoeffDMAConfig[11].CacheHint", 0x060, 6, 4),
    ("KernelDMASrc.CoeffDMAConfig[11].PrefetchParticipateEn", 0x063, 4, 1),
    ("KernelDMASrc.CoeffDMAConfig[12].En", 0x064, 0, 1),
    ("KernelDMASrc.CoeffDMAConfig[12].CrH", 0x064, 4, 2),
    ("KernelDMASrc.CoeffDMAConfig[12].CacheHint", 0x064, 6, 4),
    ("KernelDMASrc.CoeffDMAConfig[12].PrefetchParticipateEn", 0x067, 4, 1),
    ("KernelDMASrc.CoeffDMAConfig[13].En", 0x068, 0, 1),
    ("KernelDMASrc.CoeffDMAConfig[13].CrH", 0x068, 4, 2),
    ("KernelDMASrc.CoeffDMAConfig[13].CacheHint", 0x068, 6, 4),
    ("KernelDMASrc.CoeffDMAConfig[13].PrefetchParticipateEn", 0x06B, 4, 1),
    ("KernelDMASrc.CoeffDMAConfig[14].En", 0x06C, 0, 1),
    ("KernelDMASrc.CoeffDMAConfig[14].CrH", 0x06C, 4, 2),
    ("KernelDMASrc.CoeffDMAConfig[14].CacheHint", 0x06C, 6, 4),
    ("KernelDMASrc.CoeffDMAConfig[14].PrefetchParticipateEn", 0x06F, 4, 1),
    ("KernelDMASrc.CoeffDMAConfig[15].En", 0x070, 0, 1),
    ("KernelDMASrc.CoeffDMAConfig[15].CrH", 0x070, 4, 2),
    ("KernelDMASrc.CoeffDMAConfig[15].CacheHint", 0x070, 6, 4),
    ("KernelDMASrc.CoeffDMAConfig[15].PrefetchParticipateEn", 0x073, 4, 1),
    ("KernelDMASrc.CoeffBaseAddr[0].Addr", 0x074, 6, 26),
    ("KernelDMASrc.CoeffBaseAddr[1].Addr", 0x078, 6, 26),
    ("KernelDMASrc.CoeffBaseAddr[2].Addr", 0x07C, 6, 26),
    ("KernelDMASrc.CoeffBaseAddr[3].Addr", 0x080, 6, 26),
    ("KernelDMASrc.CoeffBaseAddr[4].Addr", 0x084, 6, 26),
    ("KernelDMASrc.CoeffBaseAddr[5].Addr", 0x088, 6, 26),
    ("KernelDMASrc.CoeffBaseAddr[6].Addr", 0x08C, 6, 26),
    ("KernelDMASrc.CoeffBaseAddr[7].Addr", 0x090, 6, 26),
    ("KernelDMASrc.CoeffBaseAddr[8].Addr", 0x094, 6, 26),
    ("KernelDMASrc.CoeffBaseAddr[9].Addr", 0x098, 6, 26),
    ("KernelDMASrc.CoeffBaseAddr[10].Addr", 0x09C, 6, 26),
    ("KernelDMASrc.CoeffBaseAddr[11].Addr", 0x0A0, 6, 26),
    ("KernelDMASrc.CoeffBaseAddr[12].Addr", 0x0A4, 6, 26),
    ("KernelDMASrc.CoeffBaseAddr[13].Addr", 0x0A8, 6, 26),
    ("KernelDMASrc.CoeffBaseAddr[14].Addr", 0x0AC, 6, 26),
    ("KernelDMASrc.CoeffBaseAddr[15].Addr", 0x0B0, 6, 26),
    ("KernelDMASrc.CoeffBfrSize[0].MemBfrSize", 0x0B4, 6, 26),
    ("KernelDMASrc.CoeffBfrSize[1].MemBfrSize", 0x0B8, 6, 26),
    ("KernelDMASrc.CoeffBfrSize[2].MemBfrSize", 0x0BC, 6, 26),
    ("KernelDMASrc.CoeffBfrSize[3].MemBfrSize", 0x0C0, 6, 26),
    ("KernelDMASrc.CoeffBfrSize[4].MemBfrSize", 0x0C4, 6, 26),
    ("KernelDMASrc.CoeffBfrSize[5].MemBfrSize", 0x0C8, 6, 26),
    ("KernelDMASrc.CoeffBfrSize[6].MemBfrSize", 0x0CC, 6, 26),
    ("KernelDMASrc.CoeffBfrSize[7].MemBfrSize", 0x0D0, 6, 26),
    ("KernelDMASrc.CoeffBfrSize[8].MemBfrSize", 0x0D4, 6, 26),
    ("KernelDMASrc.CoeffBfrSize[9].MemBfrSize", 0x0D8, 6, 26),
    ("KernelDMASrc.CoeffBfrSize[10].MemBfrSize", 0x0DC, 6, 26),
    ("KernelDMASrc.CoeffBfrSize[11].MemBfrSize", 0x0E0, 6, 26),
    ("KernelDMASrc.CoeffBfrSize[12].MemBfrSize", 0x0E4, 6, 26),
    ("KernelDMASrc.CoeffBfrSize[13].MemBfrSize", 0x0E8, 6, 26),
    ("KernelDMASrc.CoeffBfrSize[14].MemBfrSize", 0x0EC, 6, 26),
    ("KernelDMASrc.CoeffBfrSize[15].MemBfrSize", 0x0F0, 6, 26),
    ("Common.InDim.Win", 0x128, 0, 15),
    ("Common.InDim.Hin", 0x12A, 0, 15),
    ("Common.ChCfg.InFmt", 0x130, 0, 2),
    ("Common.ChCfg.OutFmt", 0x130, 4, 2),
    ("Common.Cin.Cin", 0x134, 0, 17),
    ("Common.Cout.Cout", 0x138, 0, 17),
    ("Common.OutDim.Wout", 0x13C, 0, 15),
    ("Common.OutDim.Hout", 0x13E, 0, 15),
    ("Common.ConvCfg.Kw", 0x144, 0, 5),
    ("Common.ConvCfg.Kh", 0x144, 5, 5),
    ("Common.ConvCfg.OCGSize", 0x145, 2, 3),
    ("Common.ConvCfg.Sx", 0x145, 5, 2),
    ("Common.ConvCfg.Sy", 0x145, 7, 2),
    ("Common.ConvCfg.Px", 0x146, 1, 5),
    ("Common.ConvCfg.Py", 0x146, 6, 5),
    ("Common.ConvCfg.Ox", 0x147, 4, 2),
    ("Common.ConvCfg.Oy", 0x147, 6, 2),
    ("Common.GroupConvCfg.NumGroups", 0x14C, 0, 13),
    ("Common.GroupConvCfg.UnicastEn", 0x14D, 6, 1),
    ("Common.GroupConvCfg.ElemMultMode", 0x14D, 7, 1),
    ("Common.GroupConvCfg.UnicastCin", 0x14E, 0, 16),
    ("Common.TileCfg.TileHeight", 0x150, 0, 15),
    ("Common.Cfg.SmallSourceMode", 0x15C, 2, 1),
    ("Common.Cfg.ShPref", 0x15D, 0, 3),
    ("Common.Cfg.ShMin", 0x15D, 4, 3),
    ("Common.Cfg.ShMax", 0x15E, 0, 3),
    ("Common.Cfg.ActiveNE", 0x15E, 3, 3),
    ("Common.Cfg.ContextSwitchIn", 0x15E, 6, 1),
    ("Common.Cfg.ContextSwitchOut", 0x15F, 0, 1),
    ("Common.Cfg.AccDoubleBufEn", 0x15F, 2, 1),
    ("Common.TaskInfo.TaskID", 0x160, 0, 16),
    ("Common.TaskInfo.TaskQ", 0x162, 0, 4),
    ("Common.TaskInfo.NID", 0x162, 4, 8),
    ("Common.DPE.Category", 0x164, 0, 4),
    ("TileDMASrc.DMAConfig.En", 0x16C, 0, 1),
    ("TileDMASrc.DMAConfig.CrH", 0x16C, 4, 2),
    ("TileDMASrc.DMAConfig.CacheHint", 0x16C, 6, 4),
    ("TileDMASrc.DMAConfig.CacheHintReuse", 0x16D, 2, 4),
    ("TileDMASrc.DMAConfig.CacheHintNoReuse", 0x16D, 6, 4),
    ("TileDMASrc.DMAConfig.DependencyMode", 0x16E, 2, 2),
    ("TileDMASrc.BaseAddr.Addr", 0x174, 6, 26),
    ("TileDMASrc.RowStride.Stride", 0x178, 6, 26),
    ("TileDMASrc.PlaneStride.PlaneStride", 0x17C, 6, 26),
    ("TileDMASrc.DepthStride.Stride", 0x180, 6, 26),
    ("TileDMASrc.GroupStride.Stride", 0x184, 6, 26),
    ("TileDMASrc.Fmt.FmtMode", 0x1A4, 0, 2),
    ("TileDMASrc.Fmt.Truncate", 0x1A4, 4, 2),
    ("TileDMASrc.Fmt.Shift", 0x1A5, 0, 1),
    ("TileDMASrc.Fmt.MemFmt", 0x1A5, 4, 2),
    ("TileDMASrc.Fmt.OffsetCh", 0x1A6, 0, 3),
    ("TileDMASrc.Fmt.Interleave", 0x1A7, 0, 4),
    ("TileDMASrc.Fmt.CmpVec", 0x1A7, 4, 4),
    ("TileDMASrc.PixelOffset[0].Offset", 0x1BC, 0, 16),
    ("TileDMASrc.PixelOffset[1].Offset", 0x1C0, 0, 16),
    ("TileDMASrc.PixelOffset[2].Offset", 0x1C4, 0, 16),
    ("TileDMASrc.PixelOffset[3].Offset", 0x1C8, 0, 16),
    ("L2.L2Cfg.InputReLU", 0x1E0, 0, 1),
    ("L2.L2Cfg.PaddingMode", 0x1E0, 2, 2),
    ("L2.SourceCfg.SourceType", 0x1E4, 0, 2),
    ("L2.SourceCfg.Dependent", 0x1E4, 2, 2),
    ("L2.SourceCfg.AliasConvSrc", 0x1E4, 4, 1),
    ("L2.SourceCfg.AliasConvRslt", 0x1E4, 5, 1),
    ("L2.SourceCfg.DMAFmt", 0x1E4, 6, 2),
    ("L2.SourceCfg.DMAInterleave", 0x1E5, 0, 4),
    ("L2.SourceCfg.DMACmpVec", 0x1E5, 4, 4),
    ("L2.SourceCfg.DMAOffsetCh", 0x1E6, 0, 3),
    ("L2.SourceCfg.AliasPlanarSrc", 0x1E6, 4, 1),
    ("L2.SourceCfg.AliasPlanarRslt", 0x1E6, 6, 1),
    ("L2.SourceBase.Addr", 0x1E8, 4, 17),
    ("L2.SourceChannelStride.Stride", 0x1EC, 4, 17),
    ("L2.SourceRowStride.Stride", 0x1F0, 4, 17),
    ("L2.ResultCfg.ResultType", 0x210, 0, 2),
    ("L2.ResultCfg.L2BfrMode", 0x210, 3, 1),
    ("L2.ResultCfg.AliasConvSrc", 0x210, 4, 1),
    ("L2.ResultCfg.AliasConvRslt", 0x210, 5, 1),
    ("L2.ResultCfg.DMAFmt", 0x210, 6, 2),
    ("L2.ResultCfg.DMAInterleave", 0x211, 0, 4),
    ("L2.ResultCfg.DMACmpVec", 0x211, 4, 4),
    ("L2.ResultCfg.DMAOffsetCh", 0x212, 0, 3),
    ("L2.ResultCfg.AliasPlanarSrc", 0x212, 4, 1),
    ("L2.ResultCfg.AliasPlanarRslt", 0x212, 6, 1),
    ("L2.ResultBase.Addr", 0x214, 4, 17),
    ("L2.ConvResultChannelStride.Stride", 0x218, 4, 17),
    ("L2.ConvResultRowStride.Stride", 0x21C, 4, 17),
    ("NE.KernelCfg.KernelFmt", 0x240, 0, 2),
    ("NE.KernelCfg.PalettizedEn", 0x240, 2, 1),
    ("NE.KernelCfg.PalettizedBits", 0x240, 4, 4),
    ("NE.KernelCfg.SparseFmt", 0x241, 0, 1),
    ("NE.KernelCfg.GroupKernelReuse", 0x241, 2, 1),
    ("NE.MACCfg.OpMode", 0x244, 0, 3),
    ("NE.MACCfg.KernelMode", 0x244, 3, 1),
    ("NE.MACCfg.BiasMode", 0x244, 4, 1),
    ("NE.MACCfg.MatrixBiasEn", 0x244, 6, 1),
    ("NE.MACCfg.BinaryPoint", 0x245, 0, 5),
    ("NE.MACCfg.PostScaleMode", 0x245, 6, 1),
    ("NE.MACCfg.NonlinearMode", 0x246, 0, 2),
    ("NE.MatrixVectorBias.MatrixVectorBias", 0x248, 0, 16),
    ("NE.AccBias.AccBias", 0x24C, 0, 16),
    ("NE.AccBias.AccBiasShift", 0x24E, 0, 5),
    ("NE.PostScale.PostScale", 0x250, 0, 16),
    ("NE.PostScale.PostRightShift", 0x252, 0, 5),
    ("TileDMADst.DMAConfig.En", 0x258, 0, 1),
    ("TileDMADst.DMAConfig.CrH", 0x258, 4, 2),
    ("TileDMADst.DMAConfig.CacheHint", 0x258, 6, 4),
    ("TileDMADst.DMAConfig.L2BfrMode", 0x25B, 2, 1),
    ("TileDMADst.DMAConfig.BypassEOW", 0x25B, 3, 1),
    ("TileDMADst.BaseAddr.Addr", 0x25C, 6, 26),
    ("TileDMADst.RowStride.RowStride", 0x260, 6, 26),
    ("TileDMADst.PlaneStride.PlaneStride", 0x264, 6, 26),
    ("TileDMADst.DepthStride.DepthStride", 0x268, 6, 26),
    ("TileDMADst.GroupStride.GroupStride", 0x26C, 6, 26),
    ("TileDMADst.Fmt.FmtMode", 0x270, 0, 2),
    ("TileDMADst.Fmt.Truncate", 0x270, 4, 2),
    ("TileDMADst.Fmt.Shift", 0x271, 0, 1),
    ("TileDMADst.Fmt.MemFmt", 0x271, 4, 2),
    ("TileDMADst.Fmt.OffsetCh", 0x272, 0, 3),
    ("TileDMADst.Fmt.ZeroPadLast", 0x272, 4, 1),
    ("TileDMADst.Fmt.ZeroPadFirst", 0x272, 5, 1),
    ("TileDMADst.Fmt.CmpVecFill", 0x272, 6, 1),
    ("TileDMADst.Fmt.Interleave", 0x273, 0, 4),
    ("TileDMADst.Fmt.CmpVec", 0x273, 4, 4),
)


def _field(name: str, offset: int, bit: int, width: int) -> Field:
    section, rest = name.split(".", 1)
    register, field = rest.rsplit(".", 1) if section != "Header" else (f"Word[{offset // 4}]", rest)
    return Field(
        name,
        section,
        register,
        field,
        offset,
        bit,
        width,
        offset // 4,
        (offset % 4) * 8 + bit,
        (1 << width) - 1,
    )


FIELDS: tuple[Field, ...] = tuple(_field(*row) for row in _TABLE)
"""The 258 named fields of the M1 TD, in bit-map order."""

PLANAR_WORDS: tuple[Field, ...] = tuple(
    Field(
        f"Planar.Word[{i}]",
        "Planar",
        f"Word[{i}]",
        "Word",
        0x22C + 4 * i,
        0,
        32,
        (0x22C + 4 * i) // 4,
        0,
        0xFFFFFFFF,
    )
    for i in range(4)
)
"""The Planar engine's 4 raw words (0x22c..0x23b), which the bit map leaves unnamed."""

TD_FIELDS: tuple[Field, ...] = FIELDS + PLANAR_WORDS
"""Everything a TD exposes by name: the 258 fields plus the 4 planar words."""

BY_NAME: dict[str, Field] = {f.name: f for f in TD_FIELDS}
"""Canonical name -> :class:`Field`."""

# fastane's readings of TD bits the recovered bit map leaves unnamed, ``(name, byte
# offset, bit, width)`` like the rows above.  They are decisions from the corpus
# (docs/device.md, "Planar engine"); :class:`~fastane.td.TaskDescriptor` reads and writes
# them by name like the named fields, and the engine adds them to every decoded register
# file (:func:`fastane.td.planar.registers`).
_UNNAMED_TABLE = (
    # ChCfg bits [3:2]: the second operand's format (2 on every binary planar TD, 0 else)
    ("Common.ChCfg.Src1InFmt", 0x130, 2, 2),
    # 0x158 bit 0 / bit 4: source 0 / source 1 is a per-row vector broadcast along W
    ("Common.Broadcast.Src0", 0x158, 0, 1),
    ("Common.Broadcast.Src1", 0x158, 4, 1),
    # Common.Cfg bits [7:4] (0x15c): 0 NE task, 2 planar unary, 3 planar binary, 5 reduction
    ("Common.Cfg.TaskType", 0x15C, 4, 4),
    # TileDMASrc's second register set (source 1): the first set's layout, 0x14 bytes on
    ("TileDMASrc1.BaseAddr.Addr", 0x188, 6, 26),
    ("TileDMASrc1.RowStride.Stride", 0x18C, 6, 26),
    ("TileDMASrc1.PlaneStride.PlaneStride", 0x190, 6, 26),
    ("TileDMASrc1.DepthStride.Stride", 0x194, 6, 26),
    ("TileDMASrc1.GroupStride.Stride", 0x198, 6, 26),
    ("TileDMASrc1.Fmt.MemFmt", 0x1A9, 4, 2),
    # L2's source-1 window (16-byte units like SourceBase/strides) and the result's
    # group stride (where a reduction puts group g's value)
    ("L2.Source1Base.Addr", 0x1FC, 4, 17),
    ("L2.Source1ChannelStride.Stride", 0x200, 4, 17),
    ("L2.Source1RowStride.Stride", 0x204, 4, 17),
    ("L2.ResultGroupStride.Stride", 0x224, 4, 17),
)

UNNAMED_FIELDS: tuple[Field, ...] = tuple(_field(*row) for row in _UNNAMED_TABLE)
"""The registers fastane reads from bits the bit map leaves unnamed (not in :data:`TD_FIELDS`)."""

UNNAMED_BY_NAME: dict[str, Field] = {f.name: f for f in UNNAMED_FIELDS}
