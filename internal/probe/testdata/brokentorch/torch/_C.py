raise ImportError("libcudart.so.12: cannot open shared object file: No such file or directory")
