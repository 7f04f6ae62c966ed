from spearpy.cli import main

main()
