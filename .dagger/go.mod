module dagger/orkpipe

go 1.24
