package helpdoc

import (
	"fmt"
	"slices"
	"strings"
)

// fileArgs are the value placeholders of flags that name a file, and
// fileFlags the flags that do though their placeholder is the generic
// "value": their values complete as file names.
var (
	fileArgs  = []string{"file", "FILE", "path", "PATH"}
	fileFlags = []string{"config", "record", "socket"}
)

// Bash renders the bash completion of sanqos: the commands at the first
// word, then the flags of the command typed (as --name), file names for
// the values of file flags and nothing for other values. flags maps a
// command to its flags; a command without any (sim, lab) completes only
// its name.
func Bash(commands []Command, flags map[string][]Flag) string {
	var b strings.Builder
	b.WriteString(`# bash completion for sanqos. Generated from 'sanqos --help' and each
# command's --help by internal/helpdoc; do not edit.
_sanqos() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local cmd="" i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in
            -*) ;;
            *) cmd=${COMP_WORDS[i]}; break ;;
        esac
    done
    if [[ -z $cmd ]]; then
        COMPREPLY=($(compgen -W "`)
	var names []string
	for _, c := range commands {
		names = append(names, c.Name)
	}
	b.WriteString(strings.Join(names, " ") + ` --help --version" -- "$cur"))
        return
    fi
    # bools: flags without a value; values: flags with one; files: those
    # whose value is a file name.
    local bools="" values="" files=""
    case $cmd in
`)
	for _, c := range commands {
		fs := flags[c.Name]
		if len(fs) == 0 {
			continue
		}
		var bools, values, files []string
		for _, f := range fs {
			switch {
			case f.Arg == "":
				bools = append(bools, f.Name)
			default:
				values = append(values, f.Name)
				if slices.Contains(fileArgs, f.Arg) || slices.Contains(fileFlags, f.Name) {
					files = append(files, f.Name)
				}
			}
		}
		fmt.Fprintf(&b, "        %s)\n            bools=%q\n            values=%q\n            files=%q ;;\n",
			c.Name, strings.Join(bools, " "), strings.Join(values, " "), strings.Join(files, " "))
	}
	b.WriteString(`        *) return ;;
    esac
    local p=${prev#-}
    p=${p#-}
    if [[ $prev == -* && " $values " == *" $p "* && $cur != -* ]]; then
        if [[ " $files " == *" $p "* ]]; then
            compopt -o filenames 2>/dev/null
            COMPREPLY=($(compgen -f -- "$cur"))
        fi
        return
    fi
    local all="--help" f
    for f in $bools $values; do all="$all --$f"; done
    COMPREPLY=($(compgen -W "$all" -- "$cur"))
}
complete -F _sanqos sanqos
`)
	return b.String()
}
