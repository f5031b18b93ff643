// Package sparse describes a file with holes by its data extents and carries it as a tar archive
// that holds only them: the tar form, written by the registry for OCI layers and by the Dagger
// executor for the files it uploads, and read back into a file with the same holes (ReadTar).
//
// # Extents
//
// An Extent is a byte range of a file. DataExtents are where the filesystem stores data
// (lseek SEEK_DATA/SEEK_HOLE: they depend on how the file was written); ContentExtents are the
// Block-sized blocks that are not all zero (they depend on the bytes only: the same file gives
// the same extents in any store, on any filesystem).
//
// # The tar form (format of the archive)
//
// A POSIX tar archive (pax format) holding one regular file, written by hand because Go's
// archive/tar writer drops the GNU.sparse records a sparse entry needs (its reader handles them).
// Everything but the data is a function of the file's name, size and data extents, so two writers
// produce it alike and a reader can compare the bytes it receives with it:
//
//	header   a pax extended header ('x' entry): path=NAME for a file without holes; for a file
//	         with holes the GNU sparse 1.0 records GNU.sparse.major=1, GNU.sparse.minor=0,
//	         GNU.sparse.name=NAME and GNU.sparse.realsize=SIZE (never path: a reader that does not
//	         know the sparse format then extracts "GNUSparseFile.0/NAME" with the map inside, not a
//	         wrong NAME); size=N when the entry's data is 8 GiB or more
//	         a ustar header: the file, type '0', mode 0444, uid and gid 0, no owner names, mtime 0
//	         (the epoch: constant, as ModelPack's reproducibility guidance asks)
//	         for a sparse file, the sparse map as the first blocks of the entry's data: the number
//	         of entries, then each entry's offset and length, decimal, one per line, padded to 512;
//	         the entries are the data extents, and, when the file ends in a hole, a last entry of
//	         length 0 at the file's size (GNU tar sets the size of the file it extracts from it)
//	data     the bytes of the file's data extents, in order, concatenated (a file without holes:
//	         the whole file). Every extent but one ending at the file's end starts and ends on a
//	         multiple of 512 (Align rounds them): GNU tar reads each extent's data in whole
//	         blocks, archive/tar reads them back to back, and both then agree
//	trailer  zeros to the next multiple of 512, then the two zero blocks that end an archive
//
// A spec-following client (archive/tar, GNU tar, bsdtar) extracts NAME with the right bytes (holes
// as zeros, or as holes where it can). ReadTar accepts exactly this form — the header it reads
// must be the one TarHeader writes for the name, size and extents it declares — and writes the
// data extents into a file whose every other byte is a hole.
package sparse
